"""What every node of a condition ran, for the record (module_utils/experiment/nodes.py, filter)."""
import json

import experiment_filters as filters
from ansible.module_utils.experiment import nodes as en
from ansible.module_utils.experiment import record as er

RANKS = {"spark1": 0, "spark2": 1}
ENV = ["MODEL_PATH=/model", "API_KEY=sk-lab-secret-value", "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123", "DSV41_WO_A_W8=1"]


def inspect(host, image="sha256:" + "a" * 64):
    return {"item": host, "rc": 0, "stdout": json.dumps([{"Image": image, "Config": {"Env": ENV}}])}


def reading(avail_gib, some=0.5, full=0.25, kernel="6.8.0-1015-nvidia"):
    return {"mem_available_bytes": int(avail_gib * 2 ** 30), "kernel": kernel,
            "pressure": {"some": {"avg10": some, "avg60": 0, "avg300": 0, "total_us": 10},
                         "full": {"avg10": full, "avg60": 0, "avg300": 0, "total_us": 7}}}


def test_node_facts_mask_secrets_and_keep_versions_kernel_and_the_three_readings():
    running = {"results": [inspect("spark1"), inspect("spark2"), {"item": "spark3", "rc": 1, "stdout": ""}]}
    images = {"results": [{"item": {"item": h}, "rc": 0, "stdout": json.dumps([{"Config": {"Labels": {
        "org.opencontainers.image.version": "0.5.4.post2-dsv41", "dsv41.flashinfer.version": "0.6.18"}}}])}
        for h in RANKS]}
    memory = {"before_restart": {"spark1": reading(7.5), "spark2": reading(6.0)},
              "after_capture": {"spark1": reading(1.1, some=3.0, full=1.5)},
              "after_measurement": {}}
    nodes = filters.dsv41_experiment_node_facts(running, images, memory, {}, RANKS)
    assert list(nodes) == ["spark1", "spark2"]
    n = nodes["spark1"]
    assert n["container_env"] == {"API_KEY": "***", "DSV41_WO_A_W8": "1", "HF_TOKEN": "***", "MODEL_PATH": "/model"}
    assert n["engine_version"] == "0.5.4.post2-dsv41" and n["flashinfer_version"] == "0.6.18"
    assert n["kernel"] == "6.8.0-1015-nvidia" and n["image_id"].startswith("sha256:aaaa")
    assert n["memory"]["before_restart"]["mem_available_gib"] == 7.5
    assert n["memory"]["after_capture"] == {"mem_available_gib": 1.1, "pressure_some_avg10": 3.0,
                                            "pressure_full_avg10": 1.5, "pressure_full_total_us": 7}
    assert n["memory"]["after_measurement"] is None, "a reading not taken is None, never guessed"
    assert "sk-lab-secret-value" not in json.dumps(nodes) and "hf_abc" not in json.dumps(nodes)


def test_the_record_tables_each_node_per_condition():
    nodes = {"spark1": {"rank": 0, "image_id": "sha256:" + "a" * 64, "engine_version": "0.5.4", "kernel": "6.8.0",
                        "container_env": {"A": "1", "B": "2"}, "graph_shapes": {"target": [1, 2, 4]},
                        "memory": {"before_restart": en._memory(reading(7.5)), "after_capture": en._memory(reading(1.1)),
                                   "after_measurement": None}}}
    rows = en.markdown_rows({"baseline": {"nodes": nodes}}, ["baseline"])
    assert rows[1] == "## Each node (what it ran and its memory, per condition)"
    assert rows[-1] == ("| baseline | spark1 | 0 | sha256:aaaaaaaaaaaa | 0.5.4 | 6.8.0 | target 1,2,4 | 2 | "
                        "7.50 / 1.10 / - | 0.50, 0.25 / 0.50, 0.25 / - |")
    assert en.markdown_rows({"baseline": {}}, ["baseline"]) == []
    # and record.md carries it
    from pathlib import Path
    from ansible.module_utils.experiment import schema as es
    path = Path(__file__).resolve().parents[4] / "experiments" / "stage_c_fence.yml"
    d = es.load_text(path.read_text(), str(path), "stage_c_fence")
    text = er.markdown({"definition": d, "conditions": {"baseline": {"nodes": nodes, "results": []}}, "verdicts": [],
                        "measured_on": "lab output"})
    assert rows[-1] in text.splitlines()
