"""Health check for one Tenstorrent card: python3 health_check.py N

Opens only /dev/tenstorrent/N through tt_umd (TTDevice.create takes that PCI
device number, a physical id, never a UMD logical id), reads its AI clock and
prints it. Exit 0: the AI clock reads a plausible value (1 to 10000 MHz); 1: it
reads 0, 0xFFFFFFFF (a dead PCIe read), anything else outside that range, or
tt_umd raised (the exception is named on the one verdict line); 2: usage error
or tt_umd cannot be imported. It deliberately opens no other card: no
enumeration, no topology discovery, none of the all-card scan that tt-smi -s
does, so checking one card never touches a card busy with another queue's job.

Works with tt_umd 0.2 and later. init_tt_device() waits for the card's ARC
processor (300 s by default since tt_umd 0.8); where it takes timeout_ms
(0.5.1 on) the wait is bounded to half of TT_DEVICE_HEALTH_CMD_TIMEOUT (60 s),
so a hung card gets its verdict before the daemon kills the check. The clock
comes from get_firmware_info_provider().get_aiclk() (0.7.1 on), which knows
every firmware's telemetry layout; older bindings read TelemetryTag.AICLK
(tag 14) and, on Wormhole firmware before 18.4.0, whose legacy table has
DDR_STATUS there, the legacy AICLK tag 24 (current MHz in its low 16 bits, the
maximum in its high 16). Telemetry may not be published for a moment right
after a reset: a failed read is tried once more after a short pause.
Self-contained (standard library + tt_umd): tt-device-queue embeds this file.
"""
import datetime
import inspect
import os
import sys
import time

USAGE = ("usage: health_check.py N\n"
         "  Open only /dev/tenstorrent/N through tt_umd and read its AI clock.\n"
         "  Exit 0 healthy, 1 unhealthy, 2 usage error or no tt_umd.\n")
DEAD_READ = 0xFFFFFFFF
MAX_AICLK_MHZ = 10000  # an AI clock reads a few hundred to ~1400 MHz; above 10 GHz is garbage
LEGACY_AICLK_TAG = 24  # Wormhole firmware < 18.4.0: (max MHz << 16) | current MHz
RETRY_PAUSE = 1.0      # s before the one retry of a read right after a reset
CMD_TIMEOUT = 60.0     # TT_DEVICE_HEALTH_CMD_TIMEOUT's default, seconds
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
            "tt_umd comes with the tt-umd Python package (0.2 or later): run this "
            "script with the Python of the virtualenv that has it (e.g. "
            "~/tenstorrent/.venv/bin/python3, the one tt-smi uses) or install "
            "it there with 'pip install tt-umd'.\n" % (type(e).__name__, e))
        return None
    return tt_umd


def init_wait():
    """Seconds init_tt_device may wait for the ARC: half of the daemon's command timeout."""
    try:
        limit = float(os.environ.get("TT_DEVICE_HEALTH_CMD_TIMEOUT", CMD_TIMEOUT))
    except ValueError:
        limit = CMD_TIMEOUT
    return (limit if 0 < limit < 1e6 else CMD_TIMEOUT) / 2


def takes_timeout(fn):
    try:
        return "timeout_ms" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a native method: its docstring holds the signature
        return "timeout_ms" in (getattr(fn, "__doc__", None) or "")


def init_card(dev):
    if takes_timeout(dev.init_tt_device):
        # The binding converts a timedelta (or float seconds) to milliseconds; an int fails.
        dev.init_tt_device(timeout_ms=datetime.timedelta(seconds=init_wait()))
    else:
        dev.init_tt_device()


def retried(read):
    """read(), tried once more after RETRY_PAUSE when it raises or gives None."""
    try:
        value = read()
        if value is not None:
            return value
    except Exception:
        pass
    time.sleep(RETRY_PAUSE)
    return read()


def legacy_aiclk(reader):
    """The AI clock of a legacy telemetry table, or None when the card has none."""
    try:
        packed = int(reader.read_entry(LEGACY_AICLK_TAG))
    except Exception:
        return None
    mhz, top = packed & 0xFFFF, packed >> 16
    return mhz if 0 < mhz <= top <= MAX_AICLK_MHZ else None


def read_clocks(tt_umd, dev):
    """(AI clock in MHz or None, extra clock texts, a note on the table read)."""
    info = getattr(dev, "get_firmware_info_provider", None)
    info = info and info()  # None where the bindings have no provider for this card
    if info is not None:
        aiclk = retried(info.get_aiclk)
        if aiclk is not None:
            extras = [(n, getattr(info, "get_" + n.lower(), None)) for n in EXTRA_TAGS]
            return aiclk, extras, ""
        # None: this firmware's table, as the provider knows it, has no AI clock; the raw
        # telemetry reader still gives the verdict (a reading, or an error it names)
        if not (hasattr(dev, "get_firmware_telemetry_reader") or
                hasattr(dev, "get_arc_telemetry_reader")):
            return None, [], ""
    reader = getattr(dev, "get_firmware_telemetry_reader", None) or dev.get_arc_telemetry_reader
    reader = reader()
    aiclk = int(retried(lambda: reader.read_entry(int(tt_umd.TelemetryTag.AICLK))))
    if aiclk not in (0, DEAD_READ) and not 0 < aiclk <= MAX_AICLK_MHZ:
        legacy = legacy_aiclk(reader)
        if legacy is not None:
            return legacy, [], " (legacy telemetry table, Wormhole firmware before 18.4.0)"
    extras = []
    for name in EXTRA_TAGS:
        tag = getattr(tt_umd.TelemetryTag, name, None)
        if tag is not None:
            extras.append((name, lambda tag=tag: reader.read_entry(int(tag))))
    return aiclk, extras, ""


def extra_texts(extras):
    parts = []
    for name, read in extras:
        try:
            parts.append("%s %d MHz" % (name, int(read())))
        except Exception:
            pass  # optional: a missing or unreadable extra clock is not a verdict
    return parts


def one_line(e):
    text = " ".join(str(e).split()) or "(no message)"
    return "%s: %s" % (type(e).__name__, text[:400])


def check(tt_umd, card):
    step = "TTDevice.create"
    try:
        dev = tt_umd.TTDevice.create(card)
        step = "init_tt_device"
        init_card(dev)
        step = "reading the AI clock"
        aiclk, extras, note = read_clocks(tt_umd, dev)
    except Exception as e:
        print("card %d: tt_umd error in %s: %s: unhealthy" % (card, step, one_line(e)))
        return 1
    if aiclk is None:
        print("card %d: the firmware reports no AI clock: unhealthy" % card)
        return 1
    aiclk = int(aiclk)
    if aiclk == DEAD_READ or not 0 < aiclk <= MAX_AICLK_MHZ:
        why = ("dead PCIe read" if aiclk == DEAD_READ else "clock is zero" if aiclk == 0
               else "not a clock in MHz (1 to %d)" % MAX_AICLK_MHZ)
        print("card %d: AICLK %s (%d): %s: unhealthy" % (card, hex(aiclk), aiclk, why))
        return 1
    parts = ["AICLK %d MHz%s" % (aiclk, note)] + extra_texts(extras)
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
