# The fuzz targets (sourced by tests/fuzz/run.sh and scripts/fuzz.sh); keep in step with
# tests/fuzz/targets.cmake, which builds them.
# shellcheck disable=SC2034
FUZZ_TARGETS=(uniqueid wire config root listener agent_ipc nccl_ipc agent_reply agent_server webhook
    kubeconfig standalone pod pod_ranks comm)
# What CI fuzzes for a fixed time (scripts/test.sh): every target but agent_server, which stalls
# after some 50-170 thousand inputs: one connection to the agent's socket server is neither
# answered nor closed within 60 s, although every input alone runs in milliseconds (reproduced
# twice on the idle CI machine, 26 Nov; under investigation, see docs/security.md). Its corpus is
# still replayed by fuzz_replay_agent_server in every build, and scripts/fuzz.sh fuzzes it.
FUZZ_CI_TARGETS=(uniqueid wire config root listener agent_ipc nccl_ipc agent_reply webhook
    kubeconfig standalone pod pod_ranks comm)
