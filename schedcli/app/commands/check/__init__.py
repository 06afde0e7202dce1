"""``schedcli check`` (and the pytest plugin's verdicts): ``suite`` finds and replays the
traces against their goldens, ``report`` says the verdicts (text, JSON, JUnit, CI notes)."""
