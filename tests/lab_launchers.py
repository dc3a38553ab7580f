"""The lab's launcher variants as the seeder installs them, for every test that runs or reads one.

lab/seed/host_seed.py assembles each variant's start.sh from the parts in lab/standins/launcher/ (the
``legacy`` variant is its own file, lab/standins/legacy/start.sh); a test takes the launcher from here, never
from the parts, so it reads the very file a lab host gets.
"""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "lab" / "seed" / "host_seed.py"
_SEEDER = []


def host_seed():
    """lab/seed/host_seed.py as a module (loaded once)."""
    if not _SEEDER:
        spec = importlib.util.spec_from_file_location("dsv41_lab_host_seed_launchers", SEED)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _SEEDER.append(module)
    return _SEEDER[0]


def assembled_variants():
    """The variants assembled from parts, in the seeder's order (every one but legacy)."""
    seeder = host_seed()
    return tuple(v for v in seeder.LAUNCHER_VARIANTS if v not in seeder.LAUNCHER_FILES)


def launcher_bytes(variant):
    """The bytes the seeder installs as start.sh for ``variant``."""
    data = host_seed().launcher_text(variant)
    if data is None:
        raise FileNotFoundError("launcher variant %s: its file is not beside the stand-ins" % variant)
    return data


def install_launcher(variant, dest):
    """Write ``variant``'s start.sh at ``dest`` (mode 0755, as the seeder does); returns the path."""
    dest = Path(dest)
    dest.write_bytes(launcher_bytes(variant))
    dest.chmod(0o755)
    return dest
