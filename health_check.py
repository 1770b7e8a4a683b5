"""Health check for one Tenstorrent card: python3 health_check.py N

Opens only /dev/tenstorrent/N through tt_umd (TTDevice.create takes that PCI
device number, a physical id, never a UMD logical id), reads its ARC clock
telemetry and prints it. Exit 0: AICLK reads a plausible value (1 to 10000 MHz);
1: it reads 0, 0xFFFFFFFF (a dead PCIe read), anything else outside that range,
or tt_umd raised; 2: usage error or tt_umd
cannot be imported. It deliberately opens no other card: no enumeration, no
topology discovery, none of the all-card scan that tt-smi -s does, so checking
one card never touches a card that is busy running another queue's job.
Self-contained (standard library + tt_umd): tt-device-queue embeds this file.
"""
import sys

USAGE = ("usage: health_check.py N\n"
         "  Open only /dev/tenstorrent/N through tt_umd and read its clock\n"
         "  telemetry. Exit 0 healthy, 1 unhealthy, 2 usage error or no tt_umd.\n")
DEAD_READ = 0xFFFFFFFF
MAX_AICLK_MHZ = 10000  # an AI clock reads a few hundred to ~1400 MHz; above 10 GHz is garbage
EXTRA_TAGS = ("ARCCLK", "AXICLK")  # printed when available; never decide health


def usage_error(msg):
    sys.stderr.write("health_check.py: %s\n%s" % (msg, USAGE))
    return 2


def parse_args(argv):
    """Return (card, None) or (None, exit_code)."""
    if len(argv) == 1 and argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return None, 0
    if len(argv) != 1:
        return None, usage_error("expected exactly one argument, the card number")
    arg = argv[0]
    if not (arg.isascii() and arg.isdigit()):
        return None, usage_error("card number must be a non-negative integer, "
                                 "got %r" % arg)
    return int(arg), None


def import_umd():
    try:
        import tt_umd
    except Exception as e:  # ImportError, or a broken native extension
        sys.stderr.write(
            "health_check.py: cannot import tt_umd (%s: %s)\n"
            "tt_umd comes with the tt-umd Python package: run this script with "
            "the Python of the virtualenv that has it (e.g. "
            "~/tenstorrent/.venv/bin/python3, the one tt-smi uses) or install "
            "it there with 'pip install tt-umd'.\n" % (type(e).__name__, e))
        return None
    return tt_umd


def read_extras(tt_umd, reader):
    parts = []
    for name in EXTRA_TAGS:
        tag = getattr(tt_umd.TelemetryTag, name, None)
        if tag is None:
            continue
        try:
            parts.append("%s %d MHz" % (name, int(reader.read_entry(int(tag)))))
        except Exception:
            pass  # optional: a missing or unreadable extra tag is not a verdict
    return parts


def check(tt_umd, card):
    try:
        dev = tt_umd.TTDevice.create(card)
        dev.init_tt_device()
        reader = dev.get_arc_telemetry_reader()
        aiclk = int(reader.read_entry(int(tt_umd.TelemetryTag.AICLK)))
    except Exception as e:
        print("card %d: tt_umd error: %s: %s: unhealthy"
              % (card, type(e).__name__, e))
        return 1
    if aiclk == DEAD_READ or not 0 < aiclk <= MAX_AICLK_MHZ:
        why = ("dead PCIe read" if aiclk == DEAD_READ else "clock is zero" if aiclk == 0
               else "not a clock in MHz (1 to %d)" % MAX_AICLK_MHZ)
        print("card %d: AICLK %s (%d): %s: unhealthy"
              % (card, hex(aiclk), aiclk, why))
        return 1
    parts = ["AICLK %d MHz" % aiclk] + read_extras(tt_umd, reader)
    print("card %d: %s: healthy" % (card, ", ".join(parts)))
    return 0


def main(argv):
    card, code = parse_args(argv)
    if card is None:
        return code
    tt_umd = import_umd()  # lazily, so usage errors work without tt_umd
    if tt_umd is None:
        return 2
    return check(tt_umd, card)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
