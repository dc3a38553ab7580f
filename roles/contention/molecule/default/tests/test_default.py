"""contention: only the opted-in container is paused, the rest untouched, and the action is recorded."""
import json


def test_only_comfyui_is_paused(host):
    states = dict(line.split() for line in host.check_output("docker ps -a --format '{{.Names}} {{.State}}'").splitlines())
    paused = sorted(name for name, state in states.items() if state == "paused")
    if host.backend.get_hostname() == "spark3":
        assert paused == ["comfyui"]
        assert states["dsv41-worker"] == "running"
    else:
        assert paused == []


def test_action_is_recorded_for_rollback(host):
    record = host.file(f"/home/{host.ansible.get_variables()['dsv41_login_user']}/.local/state/dsv41-fleet/contention-actions.json")
    if host.backend.get_hostname() == "spark3":
        # one entry per container: its state before the first change, and every action since
        assert json.loads(record.content_string) == [{"name": "comfyui", "before": "running", "actions": ["pause"]}]
    else:
        assert not record.exists
