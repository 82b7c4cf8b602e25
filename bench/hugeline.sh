#!/bin/sh
# Peak RSS of the readers of trajectories.jsonl (show, view per request, report --html, export,
# the compaction of a --resume)
# on a run whose one trajectory line holds a message of SIZE_MB megabytes (default 210): a run of
# two extraction tasks against the simulator, one line rewritten. Usage:
#   bench/hugeline.sh [ROLLOUT_BINARY] [SIZE_MB]
# Prints one line per reader: its exit status and its peak RSS (GNU time's maximum; VmHWM for view).
set -eu
BIN=${1:-bin/rollout}
SIZE=${2:-210}
T=$(mktemp -d)
trap 'kill $VIEW 2>/dev/null || true; rm -rf "$T"' EXIT
VIEW=
head -n 2 data/extraction.jsonl > "$T/tasks.jsonl"
"$BIN" run --input "$T/tasks.jsonl" --out "$T/run" --model-url builtin:sim --server builtin:extraction --quiet >/dev/null
KEY=$(python3 - "$T/run/trajectories.jsonl" "$SIZE" <<'PY'
import json, sys
path, size = sys.argv[1], int(sys.argv[2])
lines = open(path).read().splitlines()
l = json.loads(lines[0])
l["trajectory"]["messages"][0]["content"] = "x" * (size << 20)
lines[0] = json.dumps(l)
open(path, "w").write("\n".join(lines) + "\n")
o = json.loads(lines[1])
print(l["task_id"], l["task_index"], l["rollout_index"], l["arm"], o["task_id"], o["rollout_index"], o["arm"])
PY
)
rm -f "$T/run/trajectories.idx"
set -- $KEY
echo "line: $(head -n 1 "$T/run/trajectories.jsonl" | wc -c) bytes"
peak() { # peak RSS in MB of the command's process tree leader (GNU time)
	/usr/bin/time -f "%M" -o "$T/time" "$@" >"$T/out" 2>"$T/err"; rc=$?
	echo "exit $rc, peak $(( $(cat "$T/time" | tail -n 1) / 1024 )) MB"
}
# The first reader rebuilds trajectories.idx (the line changed): a show of the other rollout.
echo "index rebuild: $(peak "$BIN" show "$T/run" --task "$5" --repeat "$6" --arm "$7" || true)"
echo "show:          $(peak "$BIN" show "$T/run" --task "$1" --repeat "$3" --arm "$4" || true)"
echo "report --html: $(peak "$BIN" report "$T/run" --html "$T/report.html" || true)"
echo "export:        $(peak "$BIN" export "$T/run" --format sft -o "$T/sft.jsonl" || true)"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BIN" view "$T/run" --addr "127.0.0.1:$PORT" >/dev/null 2>&1 &
VIEW=$!
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.2; done
before=$(awk '/VmHWM/ {print int($2/1024)}' /proc/$VIEW/status)
code=$(curl -s -o "$T/page.html" -w '%{http_code}' "http://127.0.0.1:$PORT/trajectory?run=0&task=$2&repeat=$3&arm=$4")
after=$(awk '/VmHWM/ {print int($2/1024)}' /proc/$VIEW/status)
echo "view:          HTTP $code, $(wc -c < "$T/page.html") bytes, peak $before MB loaded, $after MB after the transcript"
kill $VIEW 2>/dev/null || true
wait $VIEW 2>/dev/null || true
VIEW=
# A resume of the finished run, a line of a rollout without a record put before the huge one:
# its compaction rewrites trajectories.jsonl, keeping the huge line.
{ echo '{"task_index":99,"rollout_index":0,"arm":"'"$4"'","trajectory":null}'; cat "$T/run/trajectories.jsonl"; } > "$T/t" && mv "$T/t" "$T/run/trajectories.jsonl"
echo "resume:        $(peak "$BIN" run --input "$T/tasks.jsonl" --out "$T/run" --model-url builtin:sim --server builtin:extraction --quiet --resume || true), trajectories.jsonl after: $(wc -l < "$T/run/trajectories.jsonl") lines, $(wc -c < "$T/run/trajectories.jsonl") bytes"
