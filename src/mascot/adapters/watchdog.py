"""Ends a vLLM server's process group once the `mascot serve` that started it has died.

    python -m mascot.adapters.watchdog PARENT_PID SERVER_PGID GRACE_S

`mascot serve` stops its server itself on every exit it sees (the server dying, SIGTERM, Ctrl-C);
this process covers the one it cannot see, SIGKILL. It polls its parent and, when the parent is
gone, sends SIGTERM to the server's whole group and SIGKILL after the grace period. It ignores
Ctrl-C (the terminal sends it to `mascot serve`, which stops the server) and exits by itself once
the group is empty.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from mascot.adapters.serve import end_process_group, group_alive

POLL_S = 0.5


def main(argv: list[str]) -> None:
    parent, pgid, grace_s = int(argv[0]), int(argv[1]), float(argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    while os.getppid() == parent and group_alive(pgid):
        time.sleep(POLL_S)
    if group_alive(pgid):
        end_process_group(pgid, grace_s)


if __name__ == "__main__":
    main(sys.argv[1:])
