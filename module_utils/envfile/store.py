# -*- coding: utf-8 -*-
"""The launcher ``.env`` on disk: atomic private writes, named snapshots and the record of "befores".

Each run that changes the file first saves it as it was in a snapshot
``<.env>.dsv41-backup-<UTC>-<run id>`` (created 0600 with ``O_EXCL``) recorded in
``<.env>.dsv41-backups.json`` beside it (the run's id, the snapshot, its sha256, the file's mode and
owner); ``launcher_env.rollback_env`` restores from that record. Writes replace the file atomically
(temporary file in the same directory, fsync, rename) and never follow a symbolic link.
"""
from __future__ import absolute_import, division, print_function

import binascii
import errno
import hashlib
import json
import os
import stat
import time

from ansible.module_utils.base import probe_read
from ansible.module_utils.envfile.shell import EnvError
from ansible.module_utils.envfile.parse import ENV_MAX_BYTES as ENV_TEXT_MAX_BYTES

__metaclass__ = type

BACKUP_INFIX = ".dsv41-backup-"
REPLACED_INFIX = ".dsv41-replaced-"
RECORD_SUFFIX = ".dsv41-backups.json"
RECORD_FORMAT = 1
RECORD_MAX_BYTES = 4 << 20
ENV_MAX_BYTES = ENV_TEXT_MAX_BYTES      # the record of a busy year is a few hundred KB


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def utc_stamp(now=None):
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))


def record_path(path):
    return path + RECORD_SUFFIX


def read_env_file(path):
    """(bytes, os.stat_result) of the .env, or (None, None) when it does not exist.

    Refuses a symlink or anything but a regular file: writing through it would change another file.
    """
    try:
        st = os.lstat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None, None
        raise EnvError("%s: cannot read: %s" % (path, exc.strerror))
    if stat.S_ISLNK(st.st_mode):
        raise EnvError("%s is a symbolic link; refusing to write through it (replace it with the file)" % path)
    if not stat.S_ISREG(st.st_mode):
        raise EnvError("%s is not a regular file" % path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        try:
            chunks, size = [], 0
            while size <= ENV_MAX_BYTES:    # one byte past the cap is enough to refuse it
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
    except OSError as exc:
        raise EnvError("%s: cannot read: %s" % (path, exc.strerror))
    if size > ENV_MAX_BYTES:
        raise EnvError("%s: %d bytes or more, larger than the %d a launcher .env may hold; not read"
                       % (path, st.st_size, ENV_MAX_BYTES))
    return b"".join(chunks), st


def fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_fd(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    os.fsync(fd)


def create_private(path, data):
    """Create ``path`` holding ``data`` with mode 0600 from the first byte (O_EXCL, no symlink)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)            # whatever the umask
        _write_fd(fd, data)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)


def write_atomic(path, data, mode, uid=None, gid=None):
    """Replace ``path`` with ``data`` (temporary file in the same directory, 0600 until renamed,
    fsync, owner and mode set, rename, fsync of the directory). Never leaves a partial file."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, ".%s.dsv41-tmp-%d-%s" % (os.path.basename(path), os.getpid(),
                                                           binascii.hexlify(os.urandom(4)).decode()))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, 0o600)
    try:
        try:
            _write_fd(fd, data)
            st = os.fstat(fd)
            if (uid is not None and uid != st.st_uid) or (gid is not None and gid != st.st_gid):
                os.fchown(fd, st.st_uid if uid is None else uid, st.st_gid if gid is None else gid)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def load_record(path):
    """The record of befores kept beside the .env: {"format", "file", "runs": [...]} (empty when absent)."""
    rpath = record_path(path)
    try:    # never through a symlink, never a FIFO or device (a hang), never more than RECORD_MAX_BYTES
        raw = probe_read.read_bytes(rpath, RECORD_MAX_BYTES)
        if raw is None:
            return {"format": RECORD_FORMAT, "file": os.path.basename(path), "runs": []}
        data = json.loads(raw.decode("utf-8"))
    except probe_read.ProbeReadError as exc:
        if exc.errno == errno.ELOOP:
            raise EnvError("%s is a symlink; the record is never read through one (fix or remove it)" % rpath)
        if exc.errno == errno.EFBIG:
            raise EnvError("%s is larger than %d bytes: not a record this tool wrote; fix or remove it"
                           % (rpath, RECORD_MAX_BYTES))
        raise EnvError("%s is not a regular file; fix or remove it" % rpath)
    except (IOError, OSError) as exc:
        raise EnvError("%s: cannot read: %s" % (rpath, exc.strerror))
    except ValueError as exc:
        raise EnvError("%s is not a valid backup record (%s); fix or remove it" % (rpath, exc))
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list) or not all(
            isinstance(r, dict) and isinstance(r.get("run_id"), str) for r in data["runs"]):
        raise EnvError("%s is not a valid backup record (expected {\"runs\": [{\"run_id\": ...}]}); fix or "
                       "remove it" % rpath)
    return data


def save_record(path, record):
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    write_atomic(record_path(path), text.encode("utf-8"), 0o600)


def record_entry(record, run_id):
    for run in record["runs"]:
        if run["run_id"] == run_id:
            return run
    return None
