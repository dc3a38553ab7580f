"""docker images (docker image ls)."""
from ..cli import Flags, write_stdout
from ..gotemplate import render_list
from ..store import Store, split_image
from ..timefmt import now_utc
from ..views import IMAGES_DEFAULT, IMAGES_HEADER, image_ctx


def cmd_images(argv):
    f = Flags([("-a|--all", "all", False, False), ("-q|--quiet", "quiet", False, False),
               ("--no-trunc", "notrunc", False, False), ("--digests", "digests", False, False),
               ("--format", "format", True, False), ("-f|--filter", "filter", True, True)], argv, "images")
    now = now_utc()
    with Store() as store:
        ims = sorted(store.images, key=lambda i: i["Created"], reverse=True)
        cs = store.containers
    if f.args:
        repo, tag = split_image(f.args[0])
        ims = [i for i in ims if i["Repository"] == repo and (":" not in f.args[0] or i["Tag"] == tag)]
    fmt = "{{.ID}}" if f.get("quiet") else (f.get("format") or IMAGES_DEFAULT)
    write_stdout(render_list(fmt, [image_ctx(i, not f.get("notrunc"), now, cs) for i in ims], IMAGES_HEADER))
    return 0
