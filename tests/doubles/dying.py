"""A policy whose process ends while the debugger's worker answers (engine/travel): the
checkpoint must say so, and no question may wait without end."""

from __future__ import annotations

import os
import signal
import time

from schedcli import Task
from tests.plugin_policies import OnePerBatch


class DiesAnswering(OnePerBatch):
    """OnePerBatch whose process ends as the debugger's worker answers: asked for work while
    explaining (a worker about to give a step's reasons), it adds its pid to the file
    $SCHEDCLI_TEST_DIES names; while the file held fewer than $SCHEDCLI_TEST_DEATHS pids
    before, it is killed (SIGKILL), or, with $SCHEDCLI_TEST_HOW set to ``exit``, ends with
    exit status 0, or, set to ``wait``, waits to be killed by the test."""

    name = "dies-answering"

    def get_work(self) -> list[Task]:
        path = os.environ.get("SCHEDCLI_TEST_DIES")
        if self.explaining and path:
            with open(path, "a+") as f:
                f.seek(0)
                before = len(f.read().split())
                f.write(f"{os.getpid()}\n")
            if before < int(os.environ.get("SCHEDCLI_TEST_DEATHS", "1")):
                how = os.environ.get("SCHEDCLI_TEST_HOW", "kill")
                if how == "exit":
                    os._exit(0)
                while how == "wait":
                    time.sleep(1)
                os.kill(os.getpid(), signal.SIGKILL)
        return super().get_work()
