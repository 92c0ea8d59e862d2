#!/bin/bash
# Evidence for docs/guarantees.md: remove one guard at a time, run the tests that prove it (they must
# fail), restore the file with git. Refuses to run over uncommitted changes to the files it edits.
# Usage: PYTHON=.venv/bin/python tests/guard_removal.sh
cd "$(dirname "$0")/.." || exit 1
PY=${PYTHON:-python3}
EDITED="patchkit/series.py patchkit/pristine.py patchkit/lock.py patchkit/rebase/backup.py patchkit/rebase/run.py patchkit/transaction.py patchkit/bookkeeping.py patchkit/target.py patchkit/patchfile.py patchkit/engine.py patchkit/jsonio.py patchkit/cli.py patchkit/fetch.py"
if [ -n "$(git status --porcelain -- $EDITED)" ]; then echo "uncommitted changes in $EDITED: commit them first"; exit 1; fi
run() { timeout 600 $PY -m pytest -q --tb=line -p no:cacheprovider "$@" 2>&1 | grep -E "^/|passed|failed" | cut -c1-260; }
# guard FILE OLD NEW: replace the one line OLD (exactly once) by NEW, or stop: a guard that moved must be found again
guard() { python3 - "$@" <<'PYEOF' || exit 1
import sys
path, old, new = sys.argv[1:4]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"guard_removal.sh: {path}: expected the guard once, found it {text.count(old)} times: {old!r}")
open(path, "w").write(text.replace(old, new))
PYEOF
git diff --stat "$1"; }
echo "== traversal guard (series.py: paths.under -> the old startswith(root + '/'))"
sed -i 's/            under(path, root, f"{p.path}: diff path")/            assert path.startswith(root + "\/")/; s/            under(rel, root, f"{p.path}: Overlay")/            assert rel.startswith(root + "\/")/' patchkit/series.py
git diff --stat patchkit/series.py
run tests/faults/test_faults_paths.py -k "climbs_out"
git checkout patchkit/series.py
echo "== zip-slip guard (pristine.py: entry names no longer checked)"
sed -i 's/            clean_relpath(name, f"{self.wheel.name}: wheel entry")/            pass/' patchkit/pristine.py
git diff --stat patchkit/pristine.py
run tests/faults/test_faults_paths.py -k "zip_slip"
git checkout patchkit/pristine.py
echo "== lock guard (lock.py: locked() holds nothing)"
python3 - <<'PYEOF'
p='patchkit/lock.py'; s=open(p).read()
s=s.replace('    if key in _held:\n', '    if True:  # GUARD REMOVED\n',1); open(p,'w').write(s)
PYEOF
git diff --stat patchkit/lock.py
run tests/faults/test_faults_lock.py
git checkout patchkit/lock.py
echo "== abort guard (rebase/backup.py: backup_problem() vouches for any backup)"
python3 - <<'PYEOF'
p='patchkit/rebase/backup.py'; s=open(p).read()
s=s.replace('    """Why `backup` is not a complete backup (None when every file it lists is there, intact, and nothing else)."""\n',
            '    """Why `backup` is not a complete backup (None when every file it lists is there, intact, and nothing else)."""\n    return None  # GUARD REMOVED\n',1); open(p,'w').write(s)
PYEOF
git diff --stat patchkit/rebase/backup.py
run tests/faults/test_faults_kill.py -k "abort"
git checkout patchkit/rebase/backup.py
echo "== abort guard, second half (rebase/run.py: abort restores whenever a backup dir exists, as before)"
python3 - <<'PYEOF'
p='patchkit/rebase/run.py'; s=open(p).read()
s=s.replace('    refreshing = (base / REFRESHING).exists()\n', '    refreshing = (base / "backup" / "pin.lock").exists()  # GUARD REMOVED\n',1)
s=s.replace('    if refreshing and problem:\n', '    if False:\n',1)
open(p,'w').write(s)
PYEOF
git diff --stat patchkit/rebase/run.py
run tests/faults/test_faults_kill.py -k "abort"
git checkout patchkit/rebase/run.py
echo "== RECORD guard (pristine.py: the unpacked files are not verified)"
sed -i 's/            self._verify(stage, names, dist_info)/            pass/' patchkit/pristine.py
git diff --stat patchkit/pristine.py
run tests/faults/test_faults_unpack.py -k "record"
git checkout patchkit/pristine.py
echo "== atomic-unpack guard (pristine.py: files written straight into place, no staging)"
sed -i 's/        stage = Path(tempfile.mkdtemp(prefix=STAGE_PREFIX, dir=dest))/        stage = dest/; s/                os.rename(stage \/ top, dest \/ top)/                pass/; s/            shutil.rmtree(stage, ignore_errors=True)/            pass/' patchkit/pristine.py
git diff --stat patchkit/pristine.py
run tests/faults/test_faults_unpack.py -k "killed"
git checkout patchkit/pristine.py
echo "== bookkeeping guard (bookkeeping.py, moved from transaction.py in #28: a recorded digest is trusted whatever the file's stat)"
guard patchkit/bookkeeping.py '                trusted = entry["stat"] is not None and entry["stat"] == now' '                trusted = True'
run tests/faults/test_faults_paths.py -k "forged_digest"
git checkout patchkit/bookkeeping.py
# -- issue 28 ---------------------------------------------------------------------------------------
echo "== 28.1 lock files (lock.py: opened with O_CREAT, following links, as before)"
guard patchkit/lock.py '            fd = fsio.open_regular(path, f"the lock file of {label}", owned=True, create=True, mode="rw")' '            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)'
guard patchkit/lock.py '            same = os.lstat(path).st_ino == os.fstat(fd).st_ino' '            same = os.stat(path).st_ino == os.fstat(fd).st_ino'
run tests/faults/test_faults_links.py -k class1
git checkout patchkit/lock.py
echo "== 28.2 stale temps of any type (bookkeeping.py: regular files only, as before)"
guard patchkit/bookkeeping.py '            found.update(p.relative_to(self.directory).as_posix() for p in fsio.stale_temp_files(d))' '            found.update(p.relative_to(self.directory).as_posix() for p in fsio.stale_temp_files(d) if p.is_file())'
run tests/faults/test_faults_links.py -k class2_dangling
git checkout patchkit/bookkeeping.py
echo "== 28.2 target files through links (target.py: no link check, read by name)"
guard patchkit/target.py '            link = fsio.link_on_the_way(self.path, rel)' '            link = None'
guard patchkit/target.py '                self._bytes[rel] = fsio.read_regular(self.path / rel, "a file of the target")' '                self._bytes[rel] = (self.path / rel).read_bytes() if (self.path / rel).exists() else None'
run tests/faults/test_faults_links.py -k target_file
git checkout patchkit/target.py
echo "== 28.3/28.4 modes (patchfile.py: _check_modes not called)"
guard patchkit/patchfile.py '        _check_modes(block, b, path)' '        pass'
run tests/faults/test_faults_patchdata.py tests/faults/test_faults_drops.py -k "symlink or modes"
git checkout patchkit/patchfile.py
echo "== 28.3 non-regular patch data (series.py: refuse_non_regular not called)"
guard patchkit/series.py '    refuse_non_regular(Path(overlay_root), "overlay/")' '    pass'
guard patchkit/series.py '    refuse_non_regular(directory, "a patch directory")' '    pass'
run tests/faults/test_faults_patchdata.py -k "overlay or fifo"
git checkout patchkit/series.py
echo "== 28.4 pin.lock root (engine.py: a root with no file in its wheel accepted)"
guard patchkit/engine.py '            if not pristine.files_under(up.root):   # a typo'"'"'d root would make every command skip the series' '            if False:'
run tests/faults/test_faults_drops.py -k root
git checkout patchkit/engine.py
echo "== 28.5 JSON depth (jsonio.py: no depth limit, RecursionError not caught)"
guard patchkit/jsonio.py '    if depth > max_depth:' '    if False:'
guard patchkit/jsonio.py '    except (ValueError, RecursionError) as exc:' '    except ValueError as exc:'
run tests/faults/test_faults_tracebacks.py -k "nested or bundle"
git checkout patchkit/jsonio.py
echo "== 28.5 encoding (cli.py: streams not made escaping)"
guard patchkit/cli.py '    printable_streams()' '    pass'
run tests/faults/test_faults_tracebacks.py -k stdout
git checkout patchkit/cli.py
echo "== 28.6 one handle (engine.py: the wheel reopened by name after its check)"
guard patchkit/engine.py '            pristine = Pristine(*fetch_open(up, log=log))' '            path, fh = fetch_open(up, log=log); fh.close(); pristine = Pristine(path)'
run tests/faults/test_faults_races.py -k swapped
git checkout patchkit/engine.py
echo "== 28.6 cache entry kind (fetch.py: opened following links)"
guard patchkit/fetch.py '    fd = fsio.open_regular(path, f"the cached wheel of {upstream.label}")' '    fd = os.open(path, os.O_RDONLY)'
run tests/faults/test_faults_races.py -k link_is_refused
git checkout patchkit/fetch.py
echo "== 28.6 lock wait (lock.py: any float accepted)"
guard patchkit/lock.py '    if not (math.isfinite(seconds) and seconds >= 0):   # nan and inf would wait forever, a negative never' '    if seconds != seconds and False:'
run tests/faults/test_faults_races.py -k lock_wait
git checkout patchkit/lock.py
echo "== 28.6 re-check before replace (transaction.py: _recheck not called)"
guard patchkit/transaction.py '            _recheck(target, c)' '            pass'
run tests/faults/test_faults_races.py -k edit
git checkout patchkit/transaction.py
git status --short -- $EDITED
