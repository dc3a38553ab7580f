#@# The lab launcher variant "explicit": the core parts as they are; only its description.
#@# Its pieces go into the core parts (../core_*.sh), put together by lab/seed/host_seed.py into one start.sh.
#@ piece about
# LAB STAND-IN for the dsv41 TP3 launcher (start.sh), variant "explicit": every switch is listed
# explicitly on both launch paths (the head's argument builder and the workers' heredoc of -e lines).
