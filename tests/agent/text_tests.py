#!/usr/bin/env python3
"""Text that the agent cuts to its buffers (label agent).
    text_tests.py CASE --agent PATH/coll-agent --hello PATH/agent_hello_check [--keep]
Cases:
  cut_utf8  a rank's error report whose text is longer than the agent's buffers (512 bytes), in
            two-byte characters, so that every cut falls inside a character: the Communicator's
            lastError and unhealthy member, and its Event, still reach the API server (json_pack
            refuses invalid UTF-8: before agent_utf8_clean the status patch and the Event were
            not sent), with the text up to the cut and no broken character
Exit 0 pass, 1 fail, 77 skipped."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent_tests  # noqa: E402
from agent_tests import check, comm  # noqa: E402
from harness import hello, report, wait_for  # noqa: E402


def case_cut_utf8(cl):
    _, pods = cl.add_job("cut", 2)
    agents = [cl.start_agent(p) for p in pods]
    rc, out = hello(agent_tests.ARGS.hello, [a["sock"] for a in agents], check=2)
    check(rc == 0, "bootstrap failed: " + out)
    text = "\u00e9" * 400  # 800 bytes of U+00E9 (0xc3 0xa9): an odd cut splits one
    rc, out = report(agent_tests.ARGS.hello, agents[1]["sock"], "Failed", error=text)
    check(rc == 0, "report not acknowledged: " + out)

    def last_error():
        return ((comm(cl, "cut") or {}).get("status") or {}).get("lastError")
    last = wait_for(last_error, 30, "the Communicator's lastError")
    print("lastError: %d bytes, ends %r" % (len(last["message"].encode()), last["message"][-8:]))
    check("\u00e9" * 200 in last["message"], "lastError carries the text: %r" % last["message"])
    check("\ufffd" not in last["message"], "no replacement character from a broken sequence")
    members = comm(cl, "cut")["status"].get("unhealthyMembers") or []
    check(any("\u00e9" * 200 in m.get("message", "") for m in members),
          "the unhealthy member carries the text: %s" % members)

    def events():
        return [e for e in cl.objects("events") if e["involvedObject"]["kind"] == "Communicator"
                and "\u00e9" in e.get("message", "")]
    ev = wait_for(events, 30, "the Event on the Communicator")
    print("Event: %s, %d bytes" % (ev[0]["reason"], len(ev[0]["message"].encode())))
    check("\u00e9" * 200 in ev[0]["message"], "the Event carries the text: %r" % ev[0]["message"])
    log = "".join(cl.agent_log(a) for a in agents)
    check("json_pack" not in log and "Invalid UTF-8" not in log, "no encoding failure logged")


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    sys.exit(agent_tests.main(CASES))
