# Shared by the bench/ scripts (sourced).

# wait_load: wait for the 1-minute load average to drop below MAX_LOAD (at most 15 minutes)
wait_load() {
    [ -n "$MAX_LOAD" ] || return 0
    local i
    for i in $(seq 1 180); do
        awk -v max="$MAX_LOAD" '{ exit !($1 < max) }' /proc/loadavg && return 0
        [ "$i" = 1 ] && echo "   waiting for load < $MAX_LOAD (now $(cut -d' ' -f1 /proc/loadavg))"
        sleep 5
    done
    echo "   load still $(cut -d' ' -f1 /proc/loadavg) after 15 minutes; measuring anyway" >&2
}
