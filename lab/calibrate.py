"""``python -m lab.calibrate``: the command users know; the calibration itself is
:mod:`lab.machine.calibrate`."""

if __name__ == "__main__":
    from lab.machine.calibrate import main

    raise SystemExit(main())
