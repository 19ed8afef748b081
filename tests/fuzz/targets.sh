# The fuzz targets (sourced by tests/fuzz/run.sh and scripts/fuzz.sh); keep in step with
# tests/fuzz/targets.cmake, which builds them.
# shellcheck disable=SC2034
FUZZ_TARGETS=(uniqueid wire config root listener agent_ipc nccl_ipc agent_reply agent_server webhook
    kubeconfig standalone pod pod_ranks comm)
# What CI fuzzes for a fixed time (scripts/test.sh): every target. (agent_server was left out for a
# while: its harness took a poll() interrupted by libFuzzer's timeout timer for a silent server;
# fuzz_poll in fuzz_common.c retries it, see docs/security.md.)
FUZZ_CI_TARGETS=("${FUZZ_TARGETS[@]}")
