# Shared by the study scripts (arena_study.sh, alfworld_study.sh); sourced, not run.

single_run() {  # <overrides>: those a single run takes (it has no hydra.launcher)
  local a
  for a in $1; do case $a in hydra.launcher.*) ;; *) printf '%s\n' "$a" ;; esac; done
}

check_start() {  # <bc_policy_hf folder> <its name in the message> <variable name>: when the variable
                 # holds a sha256 (the start the archived runs came from, docs/results.md), stop with
                 # exit 1 unless the folder's weights have that hash: runs from another would not pair
  local want=${!3:-} got
  if [ -n "$want" ]; then
    got=$(sha256sum "$1/model.safetensors" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
      echo "the BC start $2 differs from $3=$want (its weights: $got): runs from it would not pair with those" >&2
      exit 1
    fi
  fi
}
