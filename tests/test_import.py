"""`import attnlib` pays for torch and the library, not for the figures or the checkers."""
import subprocess
import sys


def test_import_attnlib_leaves_plot_and_check_until_used():
    code = ("import sys, attnlib\n"
            "heavy = [m for m in ('matplotlib.pyplot', 'attnlib.plot', 'attnlib.check', 'torch._dynamo') "
            "if m in sys.modules]\n"
            "print(heavy)\n"
            "from attnlib import check, plot\n"
            "assert attnlib.check is check and attnlib.plot is plot and check.CHECKS\n"
            "print('matplotlib.pyplot' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.split("\n")[:2] == ["[]", "True"], run.stdout
