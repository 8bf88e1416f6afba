"""What the check scripts share (scripts/package/image-check.py, scripts/package/chart-check.py):
each check printed as it is made, the failed ones counted, and the exit
status they add up to."""

import sys

failures = []


def check(ok, what):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def finish(name):
    """Exit 1 if a check failed, else say the script passed."""
    if failures:
        print(f"{name}: {len(failures)} failed", file=sys.stderr)
        sys.exit(1)
    print(f"{name}: passed")
