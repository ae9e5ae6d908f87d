# Sourced by the service scripts: whether a server answers, and starting one in the background
# until it does.
#
#   answering URL                        true when an HTTP request to URL gets a success status
#   start_and_wait NAME LOG PIDFILE PROBE_URL CMD...
#
# Runs CMD under nohup (output appended to LOG), writes its pid to PIDFILE, then polls
# PROBE_URL every 0.5 s for up to 60 s until it is `answering`. Fails, with the log's last
# lines, when the server exits or does not answer in time.
#
# And for the scripts that install a tool rather than start a server:
#
#   present TOOL VERSION_CMD...          true, saying so with VERSION_CMD's first line, when
#                                        TOOL is on PATH
#   apt_install PACKAGE...               installs Debian packages quietly, without recommends
answering() {
  curl -sf -o /dev/null --max-time 2 "$1"
}

start_and_wait() {
  local name="$1" log="$2" pidfile="$3" url="$4"
  shift 4
  echo "$name: starting on $url (log $log)"
  # A session of its own: a caller that kills its process group (a test script's trap,
  # a job runner) must not take a shared broker down with it.
  setsid nohup "$@" >>"$log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  for _ in $(seq 1 120); do
    if answering "$url"; then
      echo "$name: ready on $url"
      return 0
    fi
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "$name: exited before it answered; last log lines:" >&2
      tail -n 20 "$log" >&2 || true
      return 1
    fi
    sleep 0.5
  done
  echo "$name: not ready after 60 s; last log lines:" >&2
  tail -n 20 "$log" >&2 || true
  return 1
}

present() {
  local tool="$1"
  shift
  command -v "$tool" >/dev/null 2>&1 || return 1
  echo "[$(basename "$0")] already installed: $("$@" 2>&1 | head -1)" >&2
}

apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
