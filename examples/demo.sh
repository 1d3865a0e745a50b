#!/usr/bin/env bash
# A tour of snapstore on a generated sample tree: snapshot, edit (also by shell commands),
# snapshot again, list, show, cat, diff, restore, undo, revert, the resident service, verify.
# Run by `make demo`; needs only `snapstore` on PATH.
set -euo pipefail

work=$(mktemp -d "${TMPDIR:-/tmp}/snapstore-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
run() { say "$*"; "$@"; }

# A small project: some source files, a binary, a nested git-like folder, an ignored build dir.
mkdir -p src docs build vendor/lib/.git
for i in $(seq 1 40); do
  printf 'def f%d(x):\n    return x * %d\n' "$i" "$i" > "src/mod$i.py"
done
printf '# Demo\n\nA sample project.\n' > docs/README.md
head -c 200000 /dev/urandom > docs/logo.bin
printf 'build/\n*.log\n' > .gitignore
echo "compiled" > build/out.o
echo "ref: refs/heads/main" > vendor/lib/.git/HEAD
echo "vendored code" > vendor/lib/lib.py

run snapstore init
run snapstore snapshot -m "before refactor" --tag start --task demo

say "... an agent edits files, a shell command deletes one, another adds one ..."
printf 'def f1(x):\n    return x + 1\n' > src/mod1.py
sed -i 's/return x \* 2/return 2 * x/' src/mod2.py
rm src/mod40.py
echo "print('new')" > src/new.py
echo "noise" > debug.log

run snapstore snapshot -m "after refactor" --task demo --meta tool=edit_file
run snapstore list
run snapstore show latest
say "snapstore cat latest~1 src/mod1.py   # the file as it was"
snapstore cat latest~1 src/mod1.py
say "snapstore cat latest src/mod1.py     # and as it is now"
snapstore cat latest src/mod1.py
run snapstore snapshot -m "no change" --skip-unchanged

say "... you edit a file by hand; then the whole tree goes back to before the refactor ..."
printf '# Demo\n\nA sample project, edited by hand.\n' > docs/README.md
say "snapstore diff --stat   # exit status 1: there are differences, like diff(1)"
snapstore diff --stat || true
run snapstore restore start
say "ls src/mod40.py   # the deleted file is back"
ls src/mod40.py
run snapstore undo
say "cat docs/README.md   # undo brought your hand edit back too (it was recorded first)"
cat docs/README.md
run snapstore oplog

say "... an agent edits the top of a file; later you edit its bottom ..."
printf 'def f5(x):\n    return x * 5\n\n\ndef g5(x):\n    return x - 5\n' > src/mod5.py
snapstore snapshot -q -m "mod5 as it was"
sed -i 's/return x \* 5/return 5 * x  # agent/' src/mod5.py
snapstore snapshot -q -m "agent rewrote f5" --meta actor=agent
sed -i 's/return x - 5/return x - 5  # mine/' src/mod5.py
run snapstore revert latest --dry-run
run snapstore revert latest
say "cat src/mod5.py   # the agent's line is back as it was, yours stays"
cat src/mod5.py

run snapstore serve --detach
say "... every command now goes through the service, which watches the tree ..."
echo "# touched" >> src/mod3.py
run snapstore snapshot -m "through the service" --task demo
run snapstore serve --stop
run snapstore verify
say "du -sh .snapstore"
du -sh .snapstore
# The checkpoint browser (snapstore ui) on this tree: keep the tree to open it.
ui_cmd="$(command -v snapstore) -C $work ui"
if [ -n "${SNAPSTORE_DEMO_KEEP:-}" ]; then
  trap - EXIT
  printf '\nDone: the demo tree stays in %s. Browse its checkpoints in a web page with:\n  %s\n' "$work" "$ui_cmd"
else
  printf '\nDone: the demo tree was in %s (removed now).\n' "$work"
  printf 'To browse its checkpoints in a web page, keep it and open the UI:\n  SNAPSTORE_DEMO_KEEP=1 make demo   # then run the "snapstore ... ui" line it prints\n'
fi
