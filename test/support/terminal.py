"""Runs a command in a pseudo-terminal and plays a script of keys against it, as a person at a terminal would.

    python3 terminal.py '<json>'   with {"argv": [...], "steps": [{"wait": "text", "send": "keys"}, ...], "timeout": s}

Each step waits until `wait` has appeared in the output since the previous step's wait (or `timeout`
seconds pass), then `delay` seconds more (default 0), then types `send`. After the steps it waits for the command to exit and prints one
JSON line: {"output": everything written to the terminal, "exit": the exit code or null, "timed_out": bool}.
"""

import json
import os
import pty
import select
import sys
import time


def main() -> None:
    spec = json.loads(sys.argv[1])
    timeout = float(spec.get("timeout", 120))
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(spec["argv"][0], spec["argv"])
    output = b""
    seen = 0
    timed_out = False

    def read_for(seconds: float) -> bool:
        """Reads what arrives within `seconds`; False once the terminal is closed."""
        nonlocal output
        ready, _, _ = select.select([fd], [], [], seconds)
        if not ready:
            return True
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return False
        if not chunk:
            return False
        output += chunk
        return True

    open_ = True
    for step in spec["steps"]:
        wanted = step["wait"].encode()
        deadline = time.monotonic() + timeout
        while open_ and output.find(wanted, seen) == -1:
            if time.monotonic() > deadline:
                timed_out = True
                break
            open_ = read_for(0.1)
        if timed_out or output.find(wanted, seen) == -1:
            break
        seen = output.find(wanted, seen) + len(wanted)
        pause_until = time.monotonic() + float(step.get("delay", 0))
        while open_ and time.monotonic() < pause_until:
            open_ = read_for(min(0.1, max(0.0, pause_until - time.monotonic())))
        os.write(fd, step["send"].encode())
    deadline = time.monotonic() + (0 if timed_out else timeout)
    while open_ and time.monotonic() < deadline:
        open_ = read_for(0.1)
    if open_:
        timed_out = True
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    print(json.dumps({"output": output.decode("utf-8", "replace"), "exit": code, "timed_out": timed_out}))


if __name__ == "__main__":
    main()
