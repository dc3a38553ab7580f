"""launch_sandbox: the head has bwrap and, as the login user, a sandbox with its own network and
pid namespaces, a read-only root and no docker socket, that leaves no process behind."""
testinfra_hosts = ["ansible://head"]

# as the evaluation builds it where a fresh /proc cannot be mounted (the lab's hosts are containers)
SANDBOX = ("bwrap --unshare-all --die-with-parent --new-session --ro-bind / / --dev /dev "
           "--tmpfs /tmp --tmpfs /run -- /bin/sh -c ")


def test_bwrap_is_installed(host):
    assert host.package("bubblewrap").is_installed
    assert host.file("/usr/bin/bwrap").mode & 0o4000 == 0      # not setuid: user namespaces do the work


def test_the_sandbox_is_isolated_as_the_login_user(host):
    out = host.check_output(SANDBOX + "'id -un; echo $$; "
                                      "ip -o link | wc -l; test -S /run/docker.sock && echo socket || echo no-socket; "
                                      "touch $HOME/.probe 2>/dev/null && echo wrote || echo read-only'")
    user, pid, links, socket, write = out.split()
    assert user == host.user().name
    assert int(pid) <= 3 and links == "1" and socket == "no-socket" and write == "read-only"   # own pid and net
    assert not host.file(host.user().home + "/.probe").exists


def test_nothing_started_inside_outlives_it(host):
    host.run(SANDBOX + "'(setsid sleep 4242 >/dev/null 2>&1 &); nohup sleep 4243 >/dev/null 2>&1 &'")
    assert host.run("pgrep -f 'sleep 424[23]'").rc == 1
