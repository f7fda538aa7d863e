"""assign_class keeps its choices while spawning stays linear (it used to replay the
round-robin from the start for every user). Run in a subprocess: importing the Locust user
module monkey-patches the interpreter."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHECK = textwrap.dedent(
    """
    import random, time
    from workload.locust.users import assign_class

    def replay(classes, index):  # the previous implementation, verbatim in effect
        fixed = [(n, c) for n, _, c in classes if c]
        for name, count in fixed:
            if index < count:
                return name
            index -= count
        weighted = [(n, w) for n, w, c in classes if not c and w > 0]
        if not weighted:
            return fixed[-1][0] if fixed else classes[0][0]
        total = sum(w for _, w in weighted)
        current = [0.0] * len(weighted)
        chosen = 0
        for _ in range(index + 1):
            for i, (_, w) in enumerate(weighted):
                current[i] += w
            chosen = max(range(len(weighted)), key=lambda i: current[i])
            current[chosen] -= total
        return weighted[chosen][0]

    random.seed(5)
    for _ in range(40):
        classes = [
            (f"c{j}", random.choice([0, 0.3, 1, 2.5, 3]), random.choice([None, None, 2]))
            for j in range(random.randint(1, 4))
        ]
        order = list(range(80))
        random.shuffle(order)
        for i in order:
            assert assign_class(classes, i) == replay(classes, i), (classes, i)
    t = time.process_time()
    for i in range(20000):
        assign_class([("a", 3.0, None), ("b", 1.0, None), ("c", 0.5, None)], i)
    assert time.process_time() - t < 5.0  # replaying made this minutes
    print("ok")
    """
)


def test_assign_class_same_choices_linear_time():
    proc = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
