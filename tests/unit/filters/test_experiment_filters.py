"""filter_plugins/experiment_filters.py: dsv41_by_host (the play's {host: value}) and dsv41_experiment_condition_record."""
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

import experiment_filters as filters
from test_experiment_checks import FENCE, RANKS, boot
from test_experiment_condition import HOSTS, _condition, _definition, _inputs

HOSTVARS = {"spark1": {"_experiment_boot": {"content": "one", "rc": 0}, "_experiment_profile": {"kernels": ["k"]}},
            "spark2": {"_experiment_boot": {"rc": 1}},
            "spark3": {}}
# the idiom dsv41_by_host replaces, as the role wrote it
IDIOM = ("{{ dict(ansible_play_hosts_all | zip(ansible_play_hosts_all | map('extract', hostvars)"
         " | map(attribute='%s', default=%s) | map(attribute='%s', default=%s))) }}")


def render(template):
    templar = Templar(loader=DataLoader(), variables={"hostvars": HOSTVARS, "ansible_play_hosts_all": HOSTS})
    return templar.template(trust_as_template(template))


def test_the_filters_are_registered_under_their_names():
    registry = filters.FilterModule().filters()
    assert registry["dsv41_by_host"] is filters.dsv41_by_host
    assert registry["dsv41_experiment_condition_record"] is filters.dsv41_experiment_condition_record


def test_by_host_gives_what_the_zip_extract_idiom_gave():
    for first, second, default in (("_experiment_boot", "content", "''"), ("_experiment_profile", "kernels", "[]"),
                                   ("_experiment_boot", "rc", "'-'")):
        idiom = render(IDIOM % (first, "{}", second, default))
        ours = render("{{ hostvars | dsv41_by_host(ansible_play_hosts_all, '%s.%s', %s) }}" % (first, second, default))
        assert ours == idiom
        assert list(ours) == HOSTS
    assert render("{{ hostvars | dsv41_by_host(ansible_play_hosts_all, '_experiment_boot.content', '') }}") == {
        "spark1": "one", "spark2": "", "spark3": ""}


def test_condition_record_takes_its_inputs_by_name():
    inputs = _inputs(_definition())
    inputs["logs"] = dict((h, boot(r, [FENCE])) for h, r in RANKS.items())
    rec = filters.dsv41_experiment_condition_record(_condition(), **inputs)
    assert set(rec) == {"condition", "arm_checks"}
    assert rec["condition"]["settings"] == {"DSV41_FOLDED_FENCE": "1"}
    assert rec["arm_checks"]["evidence_failures"] == []
