"""docker version."""
import os

from ..base import API_VERSION, CLIENT_VERSION, HOST_ARCH
from ..cli import Flags, write_stdout
from ..gotemplate import render


def cmd_version(argv):
    f = Flags([("-f|--format", "format", True, False)], argv, "version")
    server = {"Platform": {"Name": "Docker Engine - Community (lab stand-in)"}, "Version": CLIENT_VERSION,
              "ApiVersion": API_VERSION, "MinAPIVersion": "1.24", "GitCommit": "41ca978",
              "GoVersion": "go1.22.7", "Os": "linux", "Arch": HOST_ARCH, "KernelVersion": os.uname().release,
              "BuildTime": "2024-09-20T11:41:21.000000000+00:00"}
    client = {"Platform": {"Name": ""}, "Version": CLIENT_VERSION, "ApiVersion": API_VERSION,
              "DefaultAPIVersion": API_VERSION, "GitCommit": "ce12230", "GoVersion": "go1.22.7",
              "Os": "linux", "Arch": HOST_ARCH, "BuildTime": "Fri Sep 20 11:41:21 2024", "Context": "default"}
    if f.get("format"):
        write_stdout(render(f.get("format"), {"Client": client, "Server": server}) + "\n")
        return 0
    write_stdout("Client: Docker Engine - Community\n Version:           %s\n API version:       %s\n"
                 " Go version:        go1.22.7\n Git commit:        ce12230\n Built:             %s\n"
                 " OS/Arch:           linux/%s\n Context:           default\n\n"
                 "Server: %s\n Engine:\n  Version:          %s\n  API version:      %s (minimum version 1.24)\n"
                 "  Go version:       go1.22.7\n  Git commit:       41ca978\n  Built:            %s\n"
                 "  OS/Arch:          linux/%s\n  Experimental:     false\n"
                 % (CLIENT_VERSION, API_VERSION, client["BuildTime"], HOST_ARCH, server["Platform"]["Name"],
                    CLIENT_VERSION, API_VERSION, client["BuildTime"], HOST_ARCH))
    return 0
