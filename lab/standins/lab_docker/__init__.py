"""LAB STAND-IN for the ``docker`` CLI (installed at /usr/bin/docker on the lab hosts only).

The lab hosts have no container runtime.  This stand-in implements the subset of the docker CLI
that the roles, the launcher and the operators use, backed by a state file, so that a playbook
sees the same command output it would see on the real fleet.  Everything it reports is lab
output.

State (``LAB_DOCKER_STATE_DIR``, default ``/var/lib/lab-docker``; mode 2775, group ``docker``)::

    containers.json   list of container records (written atomically under ``.lock``)
    images.json       list of image records (optional; created on first use): Repository, Tag,
                      Id, RepoDigests, Created, Size and Labels (engine images: ENGINE_IMAGE_LABELS;
                      a record without Labels shows those for an engine image, {} otherwise)
    images/<64 hex id>/rootfs/sgl-workspace/adapter/*.py
                      the filesystem of a built image: what ``docker build`` copied from the
                      context's ``adapter/`` (top-level *.py only, sitecustomize.py included;
                      subdirectories such as tp4/ are not copied). Images without a build (pulled
                      fictions) have no rootfs: every path is missing in them.
    logs/<name>.log   container log in docker's json-file format, appended across restarts: one record per
                      line of output, {"log": "<line>\\n", "stream": "stdout"|"stderr", "time": RFC3339Nano}
                      stamped when the line was read (a line over 16 KiB, or output left without a
                      newline when the engine exits, is a partial record without the newline)
    run/<id>-<pid>.json  exit record written by the engine supervisor when the engine exits

A container record (the shape host_seed.py writes too)::

    {"Id": 64 hex, "Name": "dsv41-head", "Image": "dsv41-sglang:tp3", "ImageId": "sha256:...",
     "RepoDigests": [...], "Created": RFC3339Nano,
     "State": {"Status": "running|paused|exited|created", "Running", "Paused", "Pid", "ExitCode",
               "StartedAt", "FinishedAt"},
     "Config": {"Image", "Env": ["K=V", ...], "Labels": {}, "Cmd": [...], "Entrypoint": null},
     "Mounts": [{"Type": "bind", "Source", "Destination", "Mode", "RW", "Propagation"}],
     "HostConfig": {"NetworkMode": "host|bridge", "Binds": [...], ...},
     "Lab": {"engine": bool, "pgid": int|0, "stats": {"cpu_percent", "mem_bytes", "pids",
             "net_rx", "net_tx", "blk_read", "blk_write"}, "ports": [...]}}

Commands (docker CLI syntax): ps, inspect, stats --no-stream, logs [-f] [-t] [--tail N] [--since T] [--until T], start,
stop [-t N], restart, pause, unpause, rm [-f], run, exec, images, build, version; also the
``docker container ...`` / ``docker image ...`` spellings of these.  ``--format`` takes the templates
the project uses (see ``gotemplate.render``): literal text with ``{{.Field.Path}}`` and ``{{json
.Field.Path}}`` actions, and the ``table`` prefix of the default outputs; any other template is refused
with a clear error (exit 1).

Build: ``docker build -t TAG [-t TAG2] [-f FILE] [--label K=V] [-q] DIR`` (DIR = a launcher
checkout) copies ``DIR/adapter/*.py`` into a new rootfs under ``sgl-workspace/adapter/``; the image id
is the sha256 of the labels and the copied files (same content -> same id, kept like docker's cache),
labels are those of the image TAG named before (engine labels by default) plus ``--label``; TAG
moves to the new id and the previous image stays as ``<none>:<none>`` (``RepoTags`` []); prints
``Successfully built <id12>`` / ``Successfully tagged TAG`` (``-q``: ``sha256:<id>``).  Built images
have ``RepoDigests`` [] (never pushed); the seeded one carries one digest.

One-off commands: ``docker run [--rm] --entrypoint TOOL IMAGE ARGS...`` or ``docker run [--rm] IMAGE
TOOL ARGS...`` with TOOL in ONE_OFF_TOOLS (sha256sum, md5sum, cat, ls, head, tail, wc, stat, test,
true, false) and no ``-d``: the host's TOOL runs with every absolute path argument (and ``-w``)
mapped into the image rootfs, cwd ``/sgl-workspace`` of the image, the rootfs prefix removed from
its output: the real tool's output and exit code (``<sha256>  /sgl-workspace/adapter/x.py``; a
missing file: exit 1, ``sha256sum: /sgl-workspace/adapter/x.py: No such file or directory``).
Globs are not expanded (no shell, as in docker).  Other executables fail with docker's "executable
file not found" (exit 127).  Without ``--rm`` an exited container is recorded.

Engine containers: for images whose repository is ``dsv41-sglang``, ``run``/``start``/``restart``
spawn ``python3 $LAB_DOCKER_ENGINE ARGS...`` (default ``/usr/local/lib/dsv41-lab/dsv41_engine.py``;
ARGS = the container Cmd) in a new session under a small supervisor (the ``docker`` file run as
``__lab-supervise``, ``procs.supervise``) that reads the engine's stdout and stderr apart, appends each line
to the log as a json-file record of its stream, and records the engine's exit code.  The process environment is exactly
the container's Env plus the caller's PATH and HOME, ``PYTHONUNBUFFERED=1``,
``LAB_CONTAINER_NAME=<name>``, ``LAB_MOUNTS=<json {destination: source}>`` and
``LAB_IMAGE_ROOT=<state>/images/<id>/rootfs`` of the container's image (bound at create time, so a
rebuild that moves the tag does not change an existing container's image; the dir may not exist).
``docker logs`` writes stdout records to its stdout and stderr records to its stderr in log order (a change of
stream flushes what was written before, so ``2>&1`` keeps the order); ``-t`` stamps every record with its own
time.  It streams the log as docker's json-file reader does (forward record by record, ``--until`` ending the
read; ``--tail N`` read backwards from the end in blocks): memory stays flat at any size and a tail costs the
size of its records.  ``__lab-age NAME --mb N [--days D]`` (a lab knob, see ``commands/lab_age.py``) appends
days of a serving engine's periodic lines to a container's log.  stop/pause/unpause signal the process group
(SIGTERM then SIGKILL after -t, SIGSTOP, SIGCONT); when the caller may not signal it (an engine started by
root, stopped by a docker-group user) the signal is sent through ``sudo -n kill``.  A container
whose process is gone is reported ``exited`` with the engine's exit code (1 when unknown).
Other containers have no process: their state is bookkeeping only.

Layout: ``lab/standins/docker`` (``/usr/local/lib/dsv41-lab/docker`` on a lab host, which ``/usr/bin/docker``
runs through standin_shim) is the executable file: it puts its own directory on sys.path and calls
``lab_docker.cli.run``. The package, by subject: ``base`` (the state and engine paths, the daemon's facts,
DockerError), ``timefmt`` and ``sizes`` (docker's time and size formats), ``logfile`` (the json-file log:
records, docker's 16 KiB partial messages, the forward reader with --since/--until and the --tail reader),
``gotemplate`` (--format), ``store`` (containers.json / images.json, the container and image records),
``builder`` (built images' root filesystems), ``procs`` (engine processes, the ``__lab-supervise`` supervisor,
reconcile), ``views`` (what inspect / ps / stats / images print), ``cli`` (argument parsing, dispatch) and
``commands/<command>.py``. A command imports only the modules it uses: every docker call is a fresh Python.
"""
