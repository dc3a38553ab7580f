"""adapters: the checkout and the image that will run carry exactly the manifest's files."""
import pytest

FILES = ["engram_prefetch.py", "draft_head_fp8.py", "draft_tau.py", "block_verify.py", "verify_cap.py",
         "folded_fence.py", "wo_a_w8.py", "autotune_keep.py", "sitecustomize.py"]


@pytest.mark.parametrize("name", FILES)
def test_checkout_and_image_match_the_manifest(host, name):
    hv = host.ansible.get_variables()
    manifest = {
        # the lab inventory's manifest, read raw (testinfra does not template)
        k: v for k, v in hv["dsv41_adapters_manifest"].items()
    }
    checkout = host.file(f"{hv['dsv41_launcher_dir']}/adapter/{name}")
    assert checkout.sha256sum == manifest[name]
    assert checkout.mode == 0o644
    image = host.check_output(f"docker run --rm --entrypoint sha256sum dsv41-sglang:tp3 /sgl-workspace/adapter/{name}")
    assert image.split()[0] == manifest[name]


def test_tp4_file_never_deployed(host):
    hv = host.ansible.get_variables()
    assert not host.file(f"{hv['dsv41_launcher_dir']}/adapter/tp4").exists
