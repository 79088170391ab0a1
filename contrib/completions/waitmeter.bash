_waitmeter() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="waitmeter"
                ;;
            waitmeter,attach)
                cmd="waitmeter__subcmd__attach"
                ;;
            waitmeter,completions)
                cmd="waitmeter__subcmd__completions"
                ;;
            waitmeter,dump)
                cmd="waitmeter__subcmd__dump"
                ;;
            waitmeter,help)
                cmd="waitmeter__subcmd__help"
                ;;
            waitmeter,man)
                cmd="waitmeter__subcmd__man"
                ;;
            waitmeter,metrics-doc)
                cmd="waitmeter__subcmd__metrics__subcmd__doc"
                ;;
            waitmeter,run)
                cmd="waitmeter__subcmd__run"
                ;;
            waitmeter__subcmd__help,attach)
                cmd="waitmeter__subcmd__help__subcmd__attach"
                ;;
            waitmeter__subcmd__help,completions)
                cmd="waitmeter__subcmd__help__subcmd__completions"
                ;;
            waitmeter__subcmd__help,dump)
                cmd="waitmeter__subcmd__help__subcmd__dump"
                ;;
            waitmeter__subcmd__help,help)
                cmd="waitmeter__subcmd__help__subcmd__help"
                ;;
            waitmeter__subcmd__help,man)
                cmd="waitmeter__subcmd__help__subcmd__man"
                ;;
            waitmeter__subcmd__help,metrics-doc)
                cmd="waitmeter__subcmd__help__subcmd__metrics__subcmd__doc"
                ;;
            waitmeter__subcmd__help,run)
                cmd="waitmeter__subcmd__help__subcmd__run"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        waitmeter)
            opts="-v -h -V --verbose --help --version attach run dump completions man metrics-doc help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        waitmeter__subcmd__attach)
            opts="-p -v -h --pid --duration --output --interval --profile --trace --html --timeline-buffer-kib --age-slo --each-thread --children --btf --max-threads --max-processes --exit-buffer-kib --gil-probe --lock-probe --stacks --stack-interval --holder-sample-hz --syscalls --age-url --age-metric --age-labels --age-interval --age-timeout --age-socket --age-socket-mode --age-socket-group --age-max-threads --pods --node-name --pods-token-file --pods-ca-file --pods-refresh --verbose --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --pid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -p)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --duration)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --trace)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --html)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeline-buffer-kib)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --age-slo)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --btf)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-processes)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --exit-buffer-kib)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gil-probe)
                    COMPREPLY=($(compgen -W "futex uprobe" -- "${cur}"))
                    return 0
                    ;;
                --lock-probe)
                    COMPREPLY=($(compgen -W "uprobe none" -- "${cur}"))
                    return 0
                    ;;
                --stacks)
                    COMPREPLY=($(compgen -W "all python native none" -- "${cur}"))
                    return 0
                    ;;
                --stack-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --holder-sample-hz)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --syscalls)
                    COMPREPLY=($(compgen -W "on off" -- "${cur}"))
                    return 0
                    ;;
                --age-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --age-metric)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --age-labels)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --age-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --age-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --age-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --age-socket-mode)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --age-socket-group)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --age-max-threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pods)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --node-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pods-token-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pods-ca-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pods-refresh)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        waitmeter__subcmd__completions)
            opts="-v -h --verbose --help bash zsh fish"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        waitmeter__subcmd__dump)
            opts="-p -v -h --pid --window --output --html --btf --max-threads --max-processes --exit-buffer-kib --gil-probe --lock-probe --stacks --stack-interval --holder-sample-hz --syscalls --pods --node-name --pods-token-file --pods-ca-file --pods-refresh --verbose --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --pid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -p)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --window)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --html)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --btf)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-processes)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --exit-buffer-kib)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gil-probe)
                    COMPREPLY=($(compgen -W "futex uprobe" -- "${cur}"))
                    return 0
                    ;;
                --lock-probe)
                    COMPREPLY=($(compgen -W "uprobe none" -- "${cur}"))
                    return 0
                    ;;
                --stacks)
                    COMPREPLY=($(compgen -W "all python native none" -- "${cur}"))
                    return 0
                    ;;
                --stack-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --holder-sample-hz)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --syscalls)
                    COMPREPLY=($(compgen -W "on off" -- "${cur}"))
                    return 0
                    ;;
                --pods)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --node-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pods-token-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pods-ca-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pods-refresh)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        waitmeter__subcmd__help)
            opts="attach run dump completions man metrics-doc help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        waitmeter__subcmd__help__subcmd__attach)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        waitmeter__subcmd__help__subcmd__completions)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        waitmeter__subcmd__help__subcmd__dump)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        waitmeter__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        waitmeter__subcmd__help__subcmd__man)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        waitmeter__subcmd__help__subcmd__metrics__subcmd__doc)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        waitmeter__subcmd__help__subcmd__run)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        waitmeter__subcmd__man)
            opts="-v -h --dir --verbose --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        waitmeter__subcmd__metrics__subcmd__doc)
            opts="-v -h --verbose --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        waitmeter__subcmd__run)
            opts="-p -v -h --pid --all --children --comm --cgroup --listen --web.config.file --max-thread-labels --tid-labels --timeline-minutes --timeline-buffer-kib --btf --max-threads --max-processes --exit-buffer-kib --gil-probe --lock-probe --stacks --stack-interval --holder-sample-hz --syscalls --age-url --age-metric --age-labels --age-interval --age-timeout --age-socket --age-socket-mode --age-socket-group --age-max-threads --pyroscope-url --pyroscope-interval --pyroscope-service --pyroscope-label --pyroscope-tenant --pyroscope-user --pyroscope-password-file --pyroscope-ca-file --pods --node-name --pods-token-file --pods-ca-file --pods-refresh --verbose --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --pid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -p)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --comm)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cgroup)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --web.config.file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-thread-labels)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeline-minutes)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeline-buffer-kib)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --btf)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-processes)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --exit-buffer-kib)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gil-probe)
                    COMPREPLY=($(compgen -W "futex uprobe" -- "${cur}"))
                    return 0
                    ;;
                --lock-probe)
                    COMPREPLY=($(compgen -W "uprobe none" -- "${cur}"))
                    return 0
                    ;;
                --stacks)
                    COMPREPLY=($(compgen -W "all python native none" -- "${cur}"))
                    return 0
                    ;;
                --stack-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --holder-sample-hz)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --syscalls)
                    COMPREPLY=($(compgen -W "on off" -- "${cur}"))
                    return 0
                    ;;
                --age-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --age-metric)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --age-labels)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --age-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --age-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --age-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --age-socket-mode)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --age-socket-group)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --age-max-threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pyroscope-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pyroscope-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pyroscope-service)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pyroscope-label)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pyroscope-tenant)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pyroscope-user)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pyroscope-password-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pyroscope-ca-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pods)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --node-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pods-token-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pods-ca-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pods-refresh)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _waitmeter -o nosort -o bashdefault -o default waitmeter
else
    complete -F _waitmeter -o bashdefault -o default waitmeter
fi
