#!/usr/bin/env bash
# Build the JGroups node: plain javac against the JGroups jar, classes into node/jgroups/build/
# (ignored by git). Usage: node/jgroups/build.sh [JAR]  (default /usr/share/java/jgroups.jar).
# Rebuilds only when a source is newer than the stamp, or the jar changed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
jar="${1:-${SPLITBRAIN_JGROUPS_JAR:-/usr/share/java/jgroups.jar}}"
out="$here/build/classes"
stamp="$here/build/.stamp"
if [ ! -f "$jar" ]; then
  echo "jgroups build: no JGroups jar at $jar (install it: apt-get install libjgroups-java)" >&2
  exit 2
fi
if ! command -v javac >/dev/null; then
  echo "jgroups build: no javac (install a JDK: apt-get install openjdk-17-jdk-headless)" >&2
  exit 2
fi
srcs=$(find "$here/java" -name '*.java' | sort)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$jar" ] && [ -z "$(find "$here/java" -name '*.java' -newer "$stamp")" ] \
   && [ ! "$jar" -nt "$stamp" ]; then
  exit 0
fi
rm -rf "$out"
mkdir -p "$out"
# shellcheck disable=SC2086
javac -nowarn -XDignore.symbol.file -encoding UTF-8 --release 17 -cp "$jar" -d "$out" $srcs 2>&1 \
  | grep -v "sun.misc.Signal\|^[0-9]* warning\|^Note:\|^ *\^\|sun.misc.SignalHandler\|internal proprietary API" >&2 || true
[ -f "$out/splitbrain/jgroups/Node.class" ] || { echo "jgroups build: javac failed" >&2; exit 1; }
echo "$jar" > "$stamp"
