import os
import sys

# accl_testing (the multi-process helpers) lives next to the tests; spawned ranks import it and
# the test modules by name, with the parent's sys.path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# A tuning file in the developer's home (accl-tune) would change which algorithms run; ranks
# inherit this.
os.environ.setdefault("ACCL_TUNING_FILE", "none")
