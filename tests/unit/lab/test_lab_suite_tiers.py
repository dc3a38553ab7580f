"""The two tiers of the lab-level jobs (tests/run_lab_suites.py): `make test` runs the fast one (testinfra,
every molecule scenario, the playbook tests marked ``smoke``), `make test-slow` every other playbook test,
`make test-all` (CI) both. The split must lose no test and run none twice."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests"))

import run_lab_suites  # noqa: E402

PLAYBOOK_MODULES = {p.name for p in (ROOT / "tests" / "playbooks").glob("test_*.py")}


@pytest.fixture(autouse=True, scope="module")
def collect_each_selection_once():
    """pytest's collection of tests/playbooks (a subprocess of about a second) once per -m expression for this
    module's tests, instead of once per call: the runner's own jobs() calls go through it too."""
    real, seen = run_lab_suites.playbook_tests, {}

    def cached(marker_expression=None):
        if marker_expression not in seen:
            seen[marker_expression] = real(marker_expression)
        return {module: list(tests) for module, tests in seen[marker_expression].items()}
    run_lab_suites.playbook_tests = cached
    yield
    run_lab_suites.playbook_tests = real


def selected_by(job_list):
    """{module: the -m expression its job runs} for the playbook jobs of a job list."""
    out = {}
    for name, argv in job_list:
        if name.startswith(run_lab_suites.PYTEST_MODULE_JOBS):
            module = Path(argv[-1]).name
            assert name.split("/", 1)[1] == module
            out.setdefault(module, []).append(argv[argv.index("-m") + 1])
    return out


def test_every_playbook_test_runs_in_exactly_one_tier():
    everything = run_lab_suites.playbook_tests()
    assert set(everything) == PLAYBOOK_MODULES
    smoke = run_lab_suites.playbook_tests("smoke")
    slow = run_lab_suites.playbook_tests("not smoke")
    for module, tests in everything.items():
        fast_ids, slow_ids = set(smoke.get(module, [])), set(slow.get(module, []))
        assert not fast_ids & slow_ids, module
        assert fast_ids | slow_ids == set(tests), module
    # the jobs run exactly those selections
    fast_jobs, slow_jobs = selected_by(run_lab_suites.jobs("fast")), selected_by(run_lab_suites.jobs("slow"))
    assert fast_jobs == {module: ["smoke"] for module in smoke}
    assert slow_jobs == {module: ["not smoke"] for module in slow}


def test_the_fast_tier_holds_every_molecule_scenario_and_a_smoke_run_of_the_stages():
    fast = dict(run_lab_suites.jobs("fast"))
    scenarios = {"molecule/" + p.parent.parent.parent.name for p in ROOT.glob("roles/*/molecule/default/molecule.yml")}
    assert scenarios and scenarios <= set(fast)
    assert "testinfra" in fast
    smoke = run_lab_suites.playbook_tests("smoke")
    assert "test_inventory.py" in smoke
    assert {"test_stage_a.py", "test_stage_c.py", "test_stage_d.py", "test_stage_i.py"} <= set(smoke)
    # unmarked tests stay out of `make test`: the long stage runs are slow-tier only
    assert not any("passes" in t or "restores" in t for tests in smoke.values() for t in tests)


def test_all_is_both_tiers_in_one_plan():
    fast, slow, everything = (run_lab_suites.jobs(t) for t in ("fast", "slow", "all"))
    assert not {n for n, _ in fast} & {n for n, _ in slow}
    assert dict(everything) == {**dict(fast), **dict(slow)}


def test_an_unknown_tier_is_refused_naming_the_tiers():
    with pytest.raises(SystemExit, match="unknown tier 'quick' .*fast, slow, all"):
        run_lab_suites.jobs("quick")
