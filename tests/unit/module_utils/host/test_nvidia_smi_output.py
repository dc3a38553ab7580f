"""What nvidia-smi prints, read by one parser (module_utils/host/nvidia_smi.py) for every module."""
from ansible.module_utils.host import nvidia_smi

SET = 'GPU clocks set to "(gpuClkMin 0, gpuClkMax 2200)" for GPU 0000000F:01:00.0'
DENIED = "The current user does not have permission to change clocks for GPU 0000000F:01:00.0."


def test_clocks_set_line():
    assert nvidia_smi.parse_clocks_set(SET) == {"min": 0, "max": 2200, "gpu": "0000000F:01:00.0"}
    assert nvidia_smi.parse_clocks_set("All done.") is None and nvidia_smi.parse_clocks_set(None) is None


def test_permission_message():
    assert nvidia_smi.says_no_permission(DENIED) is True
    assert nvidia_smi.says_no_permission(SET) is False


def test_sm_clock_sample_of_the_first_gpu():
    assert nvidia_smi.parse_sm_clock("\n2200\n208\n") == 2200
    assert nvidia_smi.parse_sm_clock("2200, 3003\n") == 2200
    assert nvidia_smi.parse_sm_clock("[N/A]\n") is None and nvidia_smi.parse_sm_clock("") is None


def test_driver_version_of_the_first_gpu():
    assert nvidia_smi.parse_driver_version("580.95.05\n") == "580.95.05"
    assert nvidia_smi.parse_driver_version("\n580.173.02, 580.173.02\n") == "580.173.02"
    # an error message or [N/A] is no version: the precondition says "unknown" rather than compare garbage
    assert nvidia_smi.parse_driver_version("NVIDIA-SMI has failed because it couldn't communicate\n") is None
    assert nvidia_smi.parse_driver_version("[N/A]") is None and nvidia_smi.parse_driver_version(None) is None
