"""Lab hosts only: the allocation model. Files that stand for data the fleet holds fully allocated count as
allocated at their logical size, in every Python process on the host (loaded by a ``.pth`` file at
interpreter start, as the bytecode cache is; see lab/Containerfile and lab/README.md, "Stand-ins").

Why: spark2 keeps the old TP2 shards ``engram-l1-r1of2.bin`` and ``engram-l14-r1of2.bin`` (101,379,024,656
bytes). On the fleet they are fully allocated on the filesystem of spark2's Engram destination; in the lab
they are sparse (a real header, holes elsewhere), because the machine cannot hold 101 GB. Without this
model, moving or deleting them frees nothing in the lab, and the product's free-space arithmetic around a
relocation could never be checked there.

The rule (a lab fiction; ``df``, ``du``, ``stat(1)`` and every other non-Python tool show the raw figures):

- A *modeled file* is a regular file (never a symlink) named ``engram-l<L>-r<r>of<n>.bin`` with n != 3
  (the lab fleet's TP size; 4 on the TP4 lab, read from ``/etc/dsv41-lab/fleet.tp``): the TP2 stand-ins, wherever a relocation puts them and when they come back,
  whose canonical path lies under one of the *roots* within the root's depth (``/home`` and ``/data``,
  4 levels: ``/home/zurih/dsv41-engram/engram-l1-r1of2.bin`` is level 3). A relocation's temporary copy
  ``.engram-l1-r1of2.bin.dsv41-relocate.partial`` is not a modeled file: while being written it counts
  at what it really allocates (sparse); it becomes one when published under its final name.
- ``os.stat``, ``os.lstat``, ``os.fstat`` (and ``pathlib.Path.stat``/``lstat``, ``os.path.getsize``...,
  which call them) report ``st_blocks = ceil(st_size / 512)`` for a modeled file (never fewer blocks than
  it really has). ``os.scandir``'s ``DirEntry.stat()`` is C code and is not modeled.
- ``os.statvfs`` / ``os.fstatvfs`` (and ``shutil.disk_usage``) of a filesystem report ``f_bfree`` and
  ``f_bavail`` reduced by the blocks (``f_frsize`` units, rounded up) the modeled files on that same
  filesystem (same ``st_dev``; hard links counted once) would occupy beyond what they really allocate;
  never below 0.

How the modeled files are found on a statvfs call: a scan of the roots with ``os.scandir``, depth-limited,
never following a symlinked directory (only the names are read; a matching name is ``lstat``-ed), at most
``SCAN_BUDGET`` entries. The roots are the lines ``PATH [DEPTH]`` of ``/etc/dsv41-lab/allocated.roots``
(seeded on every host by lab/seed/host_seed.py; ``#`` comments); without that file, ``DEFAULT_ROOTS``
(the same ``/home 4`` and ``/data 4``); an empty file models nothing. ``stat`` needs no scan: the
per-file checks run only for a sparse regular file (fewer blocks than its size), so every other stat costs
one Python call more.

Robustness: any error inside the model (an unreadable roots file, a scan over budget, a path it cannot
resolve) gives the caller the real value; the real call's own errors reach the caller unchanged. Standard
library only; ``DSV41_LAB_ALLOCATION=off`` in the environment leaves ``os`` untouched in that process (the
raw figures, for a comparison). The environment variable ``DSV41_LAB_ALLOCATED_ROOTS`` names another roots
file (tests/unit/lab/test_allocation_model.py).
"""
import os
import stat as _stat
import _thread



def _fleet_tp(path=None):
    """The lab fleet's TP size from /etc/dsv41-lab/fleet.tp (written by the seeder: 3, or 4 on the TP4 lab);
    3 when it is absent or unreadable."""
    try:
        with open(path or os.environ.get("DSV41_LAB_FLEET_TP_FILE", "/etc/dsv41-lab/fleet.tp"), encoding="utf-8") as handle:
            value = int(handle.read().strip())
        return value if value >= 1 else 3
    except (OSError, ValueError):
        return 3


TP_SIZE = _fleet_tp()       # the lab fleet's TP size: shards of another TP size stand for fully allocated data
ROOTS_FILE = os.environ.get("DSV41_LAB_ALLOCATED_ROOTS", "/etc/dsv41-lab/allocated.roots")
DEFAULT_DEPTH = 4
MAX_DEPTH = 8
DEFAULT_ROOTS = (("/home", DEFAULT_DEPTH), ("/data", DEFAULT_DEPTH))
SCAN_BUDGET = 50000         # directory entries one statvfs call may read; beyond it, the real figures

_REAL = {name: getattr(os, name) for name in ("stat", "lstat", "fstat", "statvfs", "fstatvfs")}
_local = _thread._local()


class _OverBudget(Exception):
    pass


# ------------------------------------------------------------------------------------------- the rule
def is_modeled_name(name):
    """``engram-l<L>-r<r>of<n>.bin`` (decimal numbers) with n != TP_SIZE."""
    if not (name.startswith("engram-l") and name.endswith(".bin")):
        return False
    layer, sep, rest = name[8:-4].partition("-r")
    if not sep:
        return False
    rank, sep, size = rest.partition("of")
    if not sep:
        return False
    if not all(part and part.isascii() and part.isdigit() for part in (layer, rank, size)):
        return False
    return int(size) != TP_SIZE


def extra_blocks(size, blocks512, frsize):
    """Blocks of frsize a file of ``size`` bytes would occupy, fully allocated, beyond the
    ``blocks512`` (st_blocks) it really allocates; never negative."""
    want = -(-size // frsize)
    have = -(-(blocks512 * 512) // frsize)
    return max(0, want - have)


def read_roots(path=None):
    """((canonical root, depth), ...) from the roots file; DEFAULT_ROOTS when it does not exist."""
    try:
        with open(path or ROOTS_FILE, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        entries = DEFAULT_ROOTS
    else:
        entries = []
        for line in text.splitlines():
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            depth = int(words[1]) if len(words) > 1 else DEFAULT_DEPTH
            if not os.path.isabs(words[0]) or len(words) > 2 or depth < 1:
                raise ValueError("bad roots line %r" % line)
            entries.append((words[0], min(depth, MAX_DEPTH)))
    return tuple((os.path.realpath(root), depth) for root, depth in entries)


def within_roots(path, roots):
    """True when canonical ``path`` lies under a root, at most that root's depth below it."""
    for root, depth in roots:
        prefix = root.rstrip("/") + "/"
        if path.startswith(prefix) and len(path) > len(prefix):
            if path[len(prefix):].count("/") < depth:
                return True
    return False


def scan(roots, budget=None):
    """[(path, lstat)] of the modeled files under the roots (a directory that cannot be read is skipped)."""
    budget = SCAN_BUDGET if budget is None else budget
    found = []
    for root, depth in roots:
        stack = [(root, 1)]
        while stack:
            directory, level = stack.pop()
            try:
                entries = os.scandir(directory)
            except OSError:
                continue
            with entries:
                for entry in entries:
                    budget -= 1
                    if budget < 0:
                        raise _OverBudget("more than %d entries under %s" % (SCAN_BUDGET, root))
                    if is_modeled_name(entry.name):
                        try:
                            st = _REAL["lstat"](entry.path)
                        except OSError:
                            continue
                        if _stat.S_ISREG(st.st_mode):
                            found.append((entry.path, st))
                    elif level < depth and entry.is_dir(follow_symlinks=False):
                        stack.append((entry.path, level + 1))
    return found


def modeled_extra(dev, frsize, roots):
    """Blocks of frsize the modeled files on filesystem ``dev`` add to what they really allocate."""
    seen = set()
    extra = 0
    for _path, st in scan(roots):
        if st.st_dev != dev or st.st_ino in seen:
            continue
        seen.add(st.st_ino)
        extra += extra_blocks(st.st_size, st.st_blocks, frsize)
    return extra


def with_free_reduced(vfs, blocks):
    cls, (fields, extra) = vfs.__reduce__()
    fields = list(fields)
    fields[3] = max(0, fields[3] - blocks)      # f_bfree
    fields[4] = max(0, fields[4] - blocks)      # f_bavail
    return cls(tuple(fields), extra)


def with_blocks(st, blocks):
    cls, (fields, extra) = st.__reduce__()
    extra = dict(extra, st_blocks=blocks)
    return cls(fields, extra)


# ------------------------------------------------------------------------------------------ wrappers
def _fd_path(fd):
    return os.readlink("/proc/self/fd/%d" % fd)


def _candidate(path, dir_fd, follow):
    """The canonical path of what a stat call looked at (the link itself when not following), when its
    name is a modeled name; None otherwise (most sparse files: decided without resolving the path)."""
    if isinstance(path, int):
        where = _fd_path(path)
        return where if is_modeled_name(os.path.basename(where)) else None
    text = os.fsdecode(os.fspath(path))
    if dir_fd is not None and not text.startswith("/"):
        text = os.path.join(_fd_path(dir_fd), text)
    head, tail = os.path.split(text)
    if not is_modeled_name(tail):
        # another name: only a symlink followed to a modeled file can still be one
        if not follow or not _stat.S_ISLNK(_REAL["lstat"](text).st_mode):
            return None
        where = os.path.realpath(text)
    elif follow:
        where = os.path.realpath(text)
    else:
        where = os.path.join(os.path.realpath(head or "."), tail)
    return where if is_modeled_name(os.path.basename(where)) else None


def _modeled_stat(st, path, dir_fd, follow):
    # only a sparse regular file can change: every other stat returns here
    if not _stat.S_ISREG(st.st_mode) or st.st_blocks * 512 >= st.st_size or getattr(_local, "busy", False):
        return st
    _local.busy = True
    try:
        where = _candidate(path, dir_fd, follow)
        if where and within_roots(where, read_roots()):
            return with_blocks(st, -(-st.st_size // 512))
        return st
    except Exception:  # the model never breaks the caller: the real value
        return st
    finally:
        _local.busy = False


def _modeled_statvfs(vfs, dev_of):
    if getattr(_local, "busy", False):
        return vfs
    _local.busy = True
    try:
        blocks = modeled_extra(dev_of().st_dev, vfs.f_frsize, read_roots())
        return with_free_reduced(vfs, blocks) if blocks else vfs
    except Exception:  # the model never breaks the caller: the real value
        return vfs
    finally:
        _local.busy = False


def stat(path, *, dir_fd=None, follow_symlinks=True):
    st = _REAL["stat"](path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
    return _modeled_stat(st, path, dir_fd, follow_symlinks)


def lstat(path, *, dir_fd=None):
    st = _REAL["lstat"](path, dir_fd=dir_fd)
    return _modeled_stat(st, path, dir_fd, False)


def fstat(fd):
    st = _REAL["fstat"](fd)
    return _modeled_stat(st, fd, None, True)


def statvfs(path):
    vfs = _REAL["statvfs"](path)
    if isinstance(path, int):
        return _modeled_statvfs(vfs, lambda: _REAL["fstat"](path))
    return _modeled_statvfs(vfs, lambda: _REAL["stat"](path))


def fstatvfs(fd):
    vfs = _REAL["fstatvfs"](fd)
    return _modeled_statvfs(vfs, lambda: _REAL["fstat"](fd))


for _wrapper in (stat, lstat, fstat, statvfs, fstatvfs):
    _wrapper.__doc__ = "Lab allocation model around os.%s (lab/standins/dsv41_lab_allocation.py)." % _wrapper.__name__


def install():
    """Replace the five functions in ``os`` (and in the capability sets shutil and os.walk consult, so
    ``shutil.rmtree`` keeps its symlink-safe variant). Idempotent."""
    if os.environ.get("DSV41_LAB_ALLOCATION", "").lower() in ("off", "0", "false", "no"):
        return False
    wrappers = {"stat": stat, "lstat": lstat, "fstat": fstat, "statvfs": statvfs, "fstatvfs": fstatvfs}
    for name, wrapper in wrappers.items():
        real = _REAL[name]
        if getattr(os, name) is wrapper:
            continue
        for group in (os.supports_fd, os.supports_dir_fd, os.supports_follow_symlinks, os.supports_effective_ids):
            if real in group:
                group.add(wrapper)
        setattr(os, name, wrapper)
    return True


install()
