"""What every part of the docker stand-in shares: the state and engine paths (read from the environment once,
when the stand-in starts), the daemon's fixed facts, the lab's own commands, and DockerError."""
import os
from pathlib import Path

STATE_DIR = Path(os.environ.get("LAB_DOCKER_STATE_DIR", "/var/lib/lab-docker"))
ENGINE = os.environ.get("LAB_DOCKER_ENGINE", "/usr/local/lib/dsv41-lab/dsv41_engine.py")
ENGINE_REPOS = {"dsv41-sglang"}
# Labels of the engine image (dsv41-sglang:*) as ``docker image inspect`` shows them in Config.Labels.
ENGINE_IMAGE_LABELS = {
    "org.opencontainers.image.version": "0.5.4.post1-dsv41",   # the SGLang engine version
    "dsv41.flashinfer.version": "0.6.18",
    "dsv41.cuda.version": "13.0",
}
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CLIENT_VERSION = "27.3.1"
API_VERSION = "1.47"
SUPERVISE = "__lab-supervise"
AGE = "__lab-age"               # the lab knob that ages a container's log (commands/lab_age.py)

# The lab hosts' architecture (a DGX Spark's: GB10, arm64), as docker reports it: `docker version`'s OS/Arch
# and an image's Architecture (the lab's images are built or pulled for the host; an images.json record may
# name another, an image pulled for the wrong platform).
HOST_ARCH = "arm64"


class DockerError(Exception):
    """A failure reported like docker does: message on stderr, exit code."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code
