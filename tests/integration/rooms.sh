#!/bin/sh
# tests/integration/rooms.sh: the engine's rooms (issue 27) keep their order. kvstore/ is split
# into rooms, bottom to top:
#
#   membership -> fabric -> memory -> protocol -> modes -> front
#
# and a file of one room may include its own room's headers (by plain name: "slab.h") and those
# of the rooms below it (by room: "fabric/fabric.h"), never a header of a room above it, so the
# dependencies point one way and no import circle can form between rooms. Where a lower room must
# call up, it declares what it needs in a header of its own (memory/upcall.h) and the room above
# implements it. Also checked: every file of kvstore/ lies in a room, every room's header opens
# with what the room owns (a comment naming "Room:"), and a plain-name include names a file of
# its own room or of base/ (one that resolves elsewhere through -I would hide a crossing).
#
# Prints each violation with the file and line; exits 1 if there is any.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here" || exit 1
rooms="membership fabric memory protocol modes front"
fail=0
bad() { echo "rooms: FAIL: $*"; fail=1; }

rank() {
    i=0
    for r in $rooms; do
        [ "$r" = "$1" ] && { echo $i; return; }
        i=$((i + 1))
    done
    echo -1
}

for f in kvstore/*; do
    [ -d "$f" ] || { bad "$f lies in no room (kvstore/ holds only: $rooms)"; continue; }
    [ "$(rank "$(basename "$f")")" -ge 0 ] || bad "$f is not a room (rooms: $rooms)"
done

n=0
for room in $rooms; do
    [ -d "kvstore/$room" ] || { bad "room kvstore/$room is missing"; continue; }
    mine=$(rank "$room")
    [ -f "kvstore/$room/$room.h" ] || bad "kvstore/$room has no room header $room.h"
    if [ -f "kvstore/$room/$room.h" ] && ! head -n 40 "kvstore/$room/$room.h" | grep -q 'Room:'; then
        bad "kvstore/$room/$room.h does not open with what the room owns (\"Room:\")"
    fi
    for f in "kvstore/$room"/*.c "kvstore/$room"/*.h; do
        [ -f "$f" ] || continue
        n=$((n + 1))
        # Each quoted include: "name.h" (own room or base/) or "room/name.h" (a room below).
        grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
            sed 's/^\([0-9]*\):.*"\([^"]*\)".*/\1 \2/' |
            while read -r line inc; do
                case $inc in
                */*)
                    to=${inc%%/*}
                    r=$(rank "$to")
                    if [ "$r" -lt 0 ]; then
                        echo "rooms: FAIL: $f:$line includes \"$inc\": no room \"$to\""
                    elif [ "$r" -gt "$mine" ]; then
                        echo "rooms: FAIL: $f:$line includes \"$inc\": $room may not include" \
                             "from $to, a room above it"
                    elif [ ! -f "kvstore/$inc" ]; then
                        echo "rooms: FAIL: $f:$line includes \"$inc\", which does not exist"
                    fi
                    ;;
                *)
                    [ -f "kvstore/$room/$inc" ] || [ -f "base/$inc" ] ||
                        echo "rooms: FAIL: $f:$line includes \"$inc\", not a header of" \
                             "kvstore/$room or base/ (name another room's header by room)"
                    ;;
                esac
            done
    done
done >"${TMPDIR:-/tmp}/rooms.$$" 2>&1
cat "${TMPDIR:-/tmp}/rooms.$$"
grep -q FAIL "${TMPDIR:-/tmp}/rooms.$$" && fail=1
rm -f "${TMPDIR:-/tmp}/rooms.$$"
if [ "$fail" -ne 0 ]; then
    echo "rooms: failed"
    exit 1
fi
echo "rooms: $n files in $(echo $rooms | wc -w) rooms ($rooms): every include points down"
echo "rooms: passed"
