# BASH_ENV of the image: sourced by every non-interactive bash before it runs anything.
#
# A job that replaces the image's entrypoint with bash (SDK v3 ModelTrainer's
# `/bin/bash -c "... sm_train.sh"`, FrameworkProcessor's `/bin/bash runproc.sh`) makes bash the
# container's PID 1, and the kernel drops every signal PID 1 has no handler for: a job stop or a
# spot interruption (SIGTERM) would never reach the job's python, which would be SIGKILLed 120 s
# later without its last checkpoint. So that bash runs itself again under tini, as the image's own
# entrypoint does: tini (PID 1) sends SIGTERM to the shell's process group, the shell ignores it
# and waits, and each python there (the image's guard, trainer.user_code.guard) forwards it to its
# command and ends with 143. Any other bash (not PID 1, or already under this tini) is untouched.
if [ "$$" = 1 ] && [ -z "${TRAINER_BASH_INIT:-}" ] && [ -x /usr/bin/tini ]; then
    export TRAINER_BASH_INIT=1
    if [ -n "${BASH_EXECUTION_STRING:-}" ]; then
        exec /usr/bin/tini -g -- /bin/bash -c "$BASH_EXECUTION_STRING" "$0" "$@"
    elif [ -f "$0" ]; then
        exec /usr/bin/tini -g -- /bin/bash "$0" "$@"
    fi
fi
if [ "${TRAINER_BASH_INIT:-}" = 1 ] && [ "$PPID" = 1 ]; then
    trap '' TERM
fi
