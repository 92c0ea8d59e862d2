#!/bin/bash
# Lines and files of the house at a commit: README, BENCHMARKS, ARCHITECTURE, docs/, bench/ code (outside the run
# folders), bench/ files, test modules. Usage: bash counts.sh REV...   (from the checkout's root)
for rev in "$@"; do
  echo "== $rev ($(git log -1 --format=%cs $rev))"
  for f in README.md BENCHMARKS.md ARCHITECTURE.md; do echo "$f: $(git show $rev:$f 2>/dev/null | wc -l) lines"; done
  docs=$(git ls-tree -r --name-only $rev docs | grep '\.md$')
  echo "docs/*.md: $(for f in $docs; do git show $rev:$f; done | wc -l) lines in $(echo "$docs" | wc -l) files"
  code=$(git ls-tree -r --name-only $rev bench | grep -E '\.(py|sh)$' | grep -v -E '^bench/(results|runs)/')
  echo "bench/ code (.py, .sh; run folders apart): $(for f in $code; do git show $rev:$f; done | wc -l) lines in $(echo "$code" | wc -l) files"
  echo "bench/ files (raw output included): $(git ls-tree -r --name-only $rev bench | wc -l)"
  echo "tests/ Python files: $(git ls-tree -r --name-only $rev tests | grep -c '\.py$'), at the top of tests/: $(git ls-tree --name-only $rev tests/ | grep -c '\.py$')"
done
