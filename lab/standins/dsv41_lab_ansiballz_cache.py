"""Lab hosts only: keep the bytecode of the Python files Ansible ships in each task's AnsiballZ payload.

Every task Ansible runs on a host sends a zip (``ansible_<module>_payload.zip``) holding the module and the
``module_utils`` it imports, and Python's zipimport compiles each of those files from source on every
task, because the zip carries no bytecode: about 0.06 CPU-seconds of the 0.16 a module run costs. The lab
runs three hosts per lab instance, three instances at once, on two cores; that compile is a large share of
the test suite's time. This hook (loaded by a ``.pth`` file at interpreter start, see lab/Containerfile)
replaces zipimport's path hook with one that, for payload zips only, keeps each compiled code object in
``/var/cache/dsv41-lab/ansiballz/<uid>/``, keyed by the source's SHA-256, the module name and the
interpreter's bytecode magic. The code object is exactly what ``compile`` makes of the same source, so a
module behaves as it would uncached; a real Spark simply compiles it again each time. Every other import,
and every process that is not an Ansible module run, is left to Python's own machinery.
"""
import marshal
import os
import sys
import zipimport

# the environment variable is for the stand-in tests (tests/unit/lab/test_ansiballz_cache.py)
CACHE_ROOT = os.environ.get("DSV41_LAB_ANSIBALLZ_CACHE", "/var/cache/dsv41-lab/ansiballz")


def _is_payload(archive):
    name = os.path.basename(archive)
    return name.startswith("ansible_") and name.endswith("_payload.zip")


def _cache_file(fullname, source):
    import hashlib
    import importlib.util
    key = hashlib.sha256(importlib.util.MAGIC_NUMBER + b"\0%s\0" % fullname.encode() + source).hexdigest()
    return os.path.join(CACHE_ROOT, str(os.getuid()), key)


def _own_directory(directory):
    """The user's cache directory, made if missing; used only when this user owns it and no one else may
    write to it (the parent is world-writable, so another user could have made it first)."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        st = os.lstat(directory)
    except OSError:
        return False
    import stat
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


class CachingZipImporter(zipimport.zipimporter):
    """zipimport, with a bytecode cache for the modules of an AnsiballZ payload zip."""

    def get_code(self, fullname):
        if not _is_payload(self.archive):
            return super().get_code(fullname)
        source_path = self._source_entry(fullname)
        if source_path is None:
            return super().get_code(fullname)
        try:
            source = self.get_data(source_path)
        except (OSError, zipimport.ZipImportError):
            return super().get_code(fullname)
        path = _cache_file(fullname, source)
        if not _own_directory(os.path.dirname(path)):
            return super().get_code(fullname)
        try:
            with open(path, "rb") as handle:
                code = marshal.loads(handle.read())
            if isinstance(code, type(_is_payload.__code__)):
                return code
        except (OSError, ValueError, EOFError, TypeError):
            pass
        code = super().get_code(fullname)
        try:
            tmp = "%s.%d.tmp" % (path, os.getpid())
            with open(tmp, "wb") as handle:
                handle.write(marshal.dumps(code))
            os.replace(tmp, path)       # readers see a whole file or none
        except OSError:
            pass
        return code

    def get_filename(self, fullname):
        """zipimport's own answer, without compiling the module to give it.

        Python 3.11's zipimport decides a module's file name by compiling it (``_get_module_code``), and the
        import system asks for the name of every module it finds (``spec_from_loader``): for a payload zip
        that compile happened once per module per task even with the cache, a third of a module run's CPU."""
        return (_is_payload(self.archive) and self._source_entry(fullname)) or super().get_filename(fullname)

    def _source_entry(self, fullname):
        """The archive path of the source zipimport would load for the module (a package's __init__.py
        first, in zipimport's own search order), or None where that is bytecode (a payload carries none) or
        the module is not in this directory of the zip: zipimport then answers as it always does."""
        path = self.prefix + fullname.rpartition(".")[2]
        for suffix, isbytecode, _ispackage in zipimport._zip_searchorder:
            entry = self._files.get(path + suffix)
            if entry is not None:
                return None if isbytecode else entry[0]
        return None


def install():
    hooks = sys.path_hooks
    for i, hook in enumerate(hooks):
        if hook is zipimport.zipimporter:
            hooks[i] = CachingZipImporter
            break
    sys.path_importer_cache.clear()


install()
