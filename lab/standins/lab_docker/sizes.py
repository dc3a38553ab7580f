"""Size helpers (go-units): the sizes docker prints in stats, images and build."""


def _custom_size(fmt, size, base, units):
    i = 0
    size = float(size)
    while size >= base and i < len(units) - 1:
        size /= base
        i += 1
    return fmt % (size, units[i])


def bytes_size(n):
    """units.BytesSize: binary, 4 significant digits (119.7GiB)."""
    return _custom_size("%.4g%s", n, 1024.0, ["B", "KiB", "MiB", "GiB", "TiB", "PiB"])


def human_size(n, precision=3):
    """units.HumanSizeWithPrecision: decimal (1.23kB)."""
    return _custom_size("%%.%dg%%s" % precision, n, 1000.0, ["B", "kB", "MB", "GB", "TB", "PB"])
