# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_waitmeter_global_optspecs
    string join \n v/verbose h/help V/version
end

function __fish_waitmeter_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_waitmeter_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_waitmeter_using_subcommand
    set -l cmd (__fish_waitmeter_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c waitmeter -n "__fish_waitmeter_needs_command" -s v -l verbose -d 'More log output on stderr (-v: info, -vv: debug, including libbpf\'s log); with attach, the verdict lists every finding, idle threads one by one'
complete -c waitmeter -n "__fish_waitmeter_needs_command" -s h -l help -d 'Print help'
complete -c waitmeter -n "__fish_waitmeter_needs_command" -s V -l version -d 'Print version'
complete -c waitmeter -n "__fish_waitmeter_needs_command" -f -a "attach" -d 'Measure one process for a while: a live per-thread table, then a report'
complete -c waitmeter -n "__fish_waitmeter_needs_command" -f -a "run" -d 'Serve Prometheus metrics for one or more processes, or all of them'
complete -c waitmeter -n "__fish_waitmeter_needs_command" -f -a "dump" -d 'What every thread of a process waits on now: its state, whom it waits behind, and the code on both sides (from a short window: --window)'
complete -c waitmeter -n "__fish_waitmeter_needs_command" -f -a "completions" -d 'Print a shell\'s completion script (generated from this command line)'
complete -c waitmeter -n "__fish_waitmeter_needs_command" -f -a "man" -d 'Print the man page (generated from this command line), or write every page to a directory'
complete -c waitmeter -n "__fish_waitmeter_needs_command" -f -a "metrics-doc" -d 'Print docs/metrics.md, generated from the metric catalogue'
complete -c waitmeter -n "__fish_waitmeter_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -s p -l pid -d 'Process to measure (a PID of this PID namespace); repeat for several, or separate them with commas: a report each (with --output json, one object per line)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l duration -d 'Length of the measurement window in seconds (with a COMMAND: until it exits)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l output -d 'Report format: a table for people, or one JSON object for scripts' -r -f -a "text\t''
json\t''"
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l interval -d 'Refresh interval of the live table in seconds' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l profile -d 'Also write the wait profile of the window here (gzipped pprof: `go tool pprof FILE`); of every process measured (--children, several --pid), each sample labelled with its pid and comm' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l trace -d 'Also write every thread\'s state timeline of the window here, with who each wait was spent behind, in the Chrome trace-event format (open it in Perfetto or the Firefox Profiler)' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l html -d 'Also write the window as one self-contained web page here: the verdict, every thread\'s timeline with who each wait was spent behind, the blame graph and the wait flame graph (no network: it opens from disk in any current browser)' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l timeline-buffer-kib -d 'Size of the timeline\'s ring buffer in KiB, with --trace or --html (a power of 2, 4 to 1048576): 16384 holds 350,000 spans, over a second of 100k switches/s (it is read every 250 ms); spans lost are counted and the file says so' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l age-slo -d 'The level the application\'s age should stay under, in seconds; without it the verdict takes twice the window\'s median age plus 0.1 s (docs/verdicts.md)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l btf -d 'BTF file for a kernel without /sys/kernel/btf/vmlinux (e.g. from BTFHub)' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l max-threads -d 'Most threads measured at once (the kernel\'s thread table, rounded up to a power of 2 groups of 16 slots); a thread with no free slot among the 64 it may take is counted as lost' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l max-processes -d 'Most processes watched at once' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l exit-buffer-kib -d 'Size of the ring buffer of exited threads\' final records, in KiB (a power of 2, 4 to 1048576): 4096 holds 14,000 records, 0.5 s of 25k thread exits/s; lost records are counted' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l gil-probe -d 'GIL measurement for Python targets: futex (default, cheapest) or uprobe (adds hold times)' -r -f -a "futex\t'GIL waits from futex words at context switches: no uprobe, works on stripped builds'
uprobe\t'also uprobes on take_gil/drop_gil (needs .symtab): hold-time histograms, ~2 µs per GIL hand-off'"
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l lock-probe -d 'Lock waits of Python 3.13+ (PyMutex, threading.Lock): uprobe (default) charges them to the lock, none to futex words' -r -f -a "uprobe\t'uprobes on _PySemaphore_Wait: a wait in the parking lot is charged to the lock parked on (~2 µs per sleep)'
none\t'no uprobe: such waits are charged to the sleeping thread\'s own semaphore'"
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l stacks -d 'Stacks of both sides of each wait, for the verdict and the wait profiles: all, python, native or none' -r -f -a "all\t'native stacks (frame pointers, and .eh_frame where there are none) and Python frames'
python\t'Python frames only'
native\t'native stacks only'
none\t'no stacks: the cheapest'"
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l stack-interval -d 'A thread takes its own stack at most once per this many milliseconds (reused meanwhile)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l holder-sample-hz -d 'Per CPU, samples a second that take a GIL holder\'s native stack (its C function) while others wait behind it; 0: off' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l syscalls -d 'Count each thread\'s syscalls, calls and time (the clock-syscall check). Off by default: the probe runs on every syscall of the machine (about 0.3 µs each for unwatched processes)' -r -f -a "on\t'count calls and time per thread and syscall (a probe on every syscall of the machine)'
off\t''"
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l age-url -d 'The application\'s Prometheus endpoint holding its age/lag metric (http://HOST:PORT/PATH)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l age-metric -d 'The age metric at --age-url (gauge, histogram or summary, in seconds)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l age-labels -d 'Only the series with these labels (k=v,k2=v2)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l age-interval -d 'Poll --age-url every SECS (asking for the metric\'s samples only: ?name[]=NAME...)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l age-timeout -d 'Give up a poll of --age-url not answered in full within SECS (connect, request, whole response; at most 60)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l age-socket -d 'Receive waitmeter_client samples on this Unix socket (per-thread age); a sample is taken only from the process it speaks of (the kernel tells the sender\'s PID)' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l age-socket-mode -d 'Permissions of the --age-socket file in octal: who may send (default 0660: the agent\'s user and the socket\'s group; 0666: every local user)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l age-socket-group -d 'Group of the --age-socket file (a name from /etc/group or a gid), e.g. the group of an application that runs as another user' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l age-max-threads -d 'Most threads whose --age-socket samples are kept at once; records of more are counted as dropped (waitmeter_age_client_rejected_total{reason="state_full"})' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l pods -d 'Where the names of the node\'s pods come from: api (the API server, from inside the cluster: the pods of --node-name), a URL that answers a PodList (e.g. the kubelet\'s https://NODE:10250/pods), off, or auto: api when in a pod with --node-name set, else off' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l node-name -d 'The node whose pods `--pods api` lists (the chart sets NODE_NAME from spec.nodeName)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l pods-token-file -d 'File holding a bearer token for a --pods URL, read again for every fetch (https only; api uses the service account\'s)' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l pods-ca-file -d 'CA certificates (PEM) to check a --pods https:// server with (default: the system\'s)' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l pods-refresh -d 'Seconds between fetches of the pod list (a container the last list did not name asks for one sooner, at most every 5 s)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l each-thread -d 'A row for every thread: by default the exited threads that lived less than a tenth of the window are summed into one row per role (their name without its numbers), with their count'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -l children -d 'Also measure the processes it starts: its descendants now and those started in the window (a report each); the first report then weighs their CPU demand against the CPUs they may use ("4 processes on 2 CPUs want 4.0 CPUs: oversubscribed")'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -s v -l verbose -d 'More log output on stderr (-v: info, -vv: debug, including libbpf\'s log); with attach, the verdict lists every finding, idle threads one by one'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand attach" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -s p -l pid -d 'Process to measure; repeat for several, or separate them with commas' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l comm -d 'Every process with this name (its comm, as `pgrep -x`: the first 15 characters), now and later (looked for every second); repeat or separate with commas for several' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l cgroup -d 'Every process in this cgroup (v2 path, e.g. /system.slice/app.service) or below it, now and later; with --comm, those of them with that name' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l listen -d 'Address to serve /metrics on' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l web.config.file -d 'TLS, client certificates and basic auth for the endpoint: a file in the Prometheus exporter toolkit\'s web-config format (docs/deployment.md)' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l max-thread-labels -d 'Thread labels per process, given to the busiest names (running and waiting, with hysteresis); the rest are "other" (1 to 1000: each name is a series per state)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l timeline-minutes -d 'Keep the last N minutes of every watched thread\'s state timeline (1 to 60; at most 400,000 cells, about 22 MiB, folded coarser past that) and serve them at /debug/timeline?seconds=S (the page, or &format=trace); each watched context switch costs about 100 ns more' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l timeline-buffer-kib -d 'Size of the timeline\'s ring buffer in KiB, with --timeline-minutes (a power of 2, 4 to 1048576; read every 100 ms): spans lost are counted' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l btf -d 'BTF file for a kernel without /sys/kernel/btf/vmlinux (e.g. from BTFHub)' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l max-threads -d 'Most threads measured at once (the kernel\'s thread table, rounded up to a power of 2 groups of 16 slots); a thread with no free slot among the 64 it may take is counted as lost' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l max-processes -d 'Most processes watched at once' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l exit-buffer-kib -d 'Size of the ring buffer of exited threads\' final records, in KiB (a power of 2, 4 to 1048576): 4096 holds 14,000 records, 0.5 s of 25k thread exits/s; lost records are counted' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l gil-probe -d 'GIL measurement for Python targets: futex (default, cheapest) or uprobe (adds hold times)' -r -f -a "futex\t'GIL waits from futex words at context switches: no uprobe, works on stripped builds'
uprobe\t'also uprobes on take_gil/drop_gil (needs .symtab): hold-time histograms, ~2 µs per GIL hand-off'"
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l lock-probe -d 'Lock waits of Python 3.13+ (PyMutex, threading.Lock): uprobe (default) charges them to the lock, none to futex words' -r -f -a "uprobe\t'uprobes on _PySemaphore_Wait: a wait in the parking lot is charged to the lock parked on (~2 µs per sleep)'
none\t'no uprobe: such waits are charged to the sleeping thread\'s own semaphore'"
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l stacks -d 'Stacks of both sides of each wait, for the verdict and the wait profiles: all, python, native or none' -r -f -a "all\t'native stacks (frame pointers, and .eh_frame where there are none) and Python frames'
python\t'Python frames only'
native\t'native stacks only'
none\t'no stacks: the cheapest'"
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l stack-interval -d 'A thread takes its own stack at most once per this many milliseconds (reused meanwhile)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l holder-sample-hz -d 'Per CPU, samples a second that take a GIL holder\'s native stack (its C function) while others wait behind it; 0: off' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l syscalls -d 'Count each thread\'s syscalls, calls and time (the clock-syscall check). Off by default: the probe runs on every syscall of the machine (about 0.3 µs each for unwatched processes)' -r -f -a "on\t'count calls and time per thread and syscall (a probe on every syscall of the machine)'
off\t''"
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l age-url -d 'The application\'s Prometheus endpoint holding its age/lag metric (http://HOST:PORT/PATH)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l age-metric -d 'The age metric at --age-url (gauge, histogram or summary, in seconds)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l age-labels -d 'Only the series with these labels (k=v,k2=v2)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l age-interval -d 'Poll --age-url every SECS (asking for the metric\'s samples only: ?name[]=NAME...)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l age-timeout -d 'Give up a poll of --age-url not answered in full within SECS (connect, request, whole response; at most 60)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l age-socket -d 'Receive waitmeter_client samples on this Unix socket (per-thread age); a sample is taken only from the process it speaks of (the kernel tells the sender\'s PID)' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l age-socket-mode -d 'Permissions of the --age-socket file in octal: who may send (default 0660: the agent\'s user and the socket\'s group; 0666: every local user)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l age-socket-group -d 'Group of the --age-socket file (a name from /etc/group or a gid), e.g. the group of an application that runs as another user' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l age-max-threads -d 'Most threads whose --age-socket samples are kept at once; records of more are counted as dropped (waitmeter_age_client_rejected_total{reason="state_full"})' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l pyroscope-url -d 'Push wait profiles to this Pyroscope server (or Grafana Alloy\'s pyroscope.receive_http), e.g. http://pyroscope:4040' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l pyroscope-interval -d 'Seconds of waiting in each pushed profile' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l pyroscope-service -d 'The `service_name` label of the pushed profiles (default: each process\' command name)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l pyroscope-label -d 'An extra label of every pushed profile (repeat for several), e.g. namespace=shop' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l pyroscope-tenant -d 'Tenant of a multi-tenant Pyroscope (sent as X-Scope-OrgID)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l pyroscope-user -d 'User for basic auth (Grafana Cloud: the instance ID)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l pyroscope-password-file -d 'File holding the basic-auth password or token' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l pyroscope-ca-file -d 'CA certificates (PEM) to check an https:// server with (default: the system\'s)' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l pods -d 'Where the names of the node\'s pods come from: api (the API server, from inside the cluster: the pods of --node-name), a URL that answers a PodList (e.g. the kubelet\'s https://NODE:10250/pods), off, or auto: api when in a pod with --node-name set, else off' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l node-name -d 'The node whose pods `--pods api` lists (the chart sets NODE_NAME from spec.nodeName)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l pods-token-file -d 'File holding a bearer token for a --pods URL, read again for every fetch (https only; api uses the service account\'s)' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l pods-ca-file -d 'CA certificates (PEM) to check a --pods https:// server with (default: the system\'s)' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l pods-refresh -d 'Seconds between fetches of the pod list (a container the last list did not name asks for one sooner, at most every 5 s)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l all -d 'Every process of this PID namespace, following new processes and exits'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l children -d 'Also every process the --pid processes start (their descendants, now and later), each with its own series'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -l tid-labels -d 'Add a `tid` label (one series per thread; for debugging)'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -s v -l verbose -d 'More log output on stderr (-v: info, -vv: debug, including libbpf\'s log); with attach, the verdict lists every finding, idle threads one by one'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -s p -l pid -d 'Process to look at (a PID of this PID namespace)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l window -d 'How long to watch for whom each thread waits behind, in seconds' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l output -d 'Format: text for people, or one JSON object for scripts' -r -f -a "text\t''
json\t''"
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l html -d 'Also write the window as one self-contained web page here (as `attach --html`)' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l btf -d 'BTF file for a kernel without /sys/kernel/btf/vmlinux (e.g. from BTFHub)' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l max-threads -d 'Most threads measured at once (the kernel\'s thread table, rounded up to a power of 2 groups of 16 slots); a thread with no free slot among the 64 it may take is counted as lost' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l max-processes -d 'Most processes watched at once' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l exit-buffer-kib -d 'Size of the ring buffer of exited threads\' final records, in KiB (a power of 2, 4 to 1048576): 4096 holds 14,000 records, 0.5 s of 25k thread exits/s; lost records are counted' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l gil-probe -d 'GIL measurement for Python targets: futex (default, cheapest) or uprobe (adds hold times)' -r -f -a "futex\t'GIL waits from futex words at context switches: no uprobe, works on stripped builds'
uprobe\t'also uprobes on take_gil/drop_gil (needs .symtab): hold-time histograms, ~2 µs per GIL hand-off'"
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l lock-probe -d 'Lock waits of Python 3.13+ (PyMutex, threading.Lock): uprobe (default) charges them to the lock, none to futex words' -r -f -a "uprobe\t'uprobes on _PySemaphore_Wait: a wait in the parking lot is charged to the lock parked on (~2 µs per sleep)'
none\t'no uprobe: such waits are charged to the sleeping thread\'s own semaphore'"
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l stacks -d 'Stacks of both sides of each wait, for the verdict and the wait profiles: all, python, native or none' -r -f -a "all\t'native stacks (frame pointers, and .eh_frame where there are none) and Python frames'
python\t'Python frames only'
native\t'native stacks only'
none\t'no stacks: the cheapest'"
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l stack-interval -d 'A thread takes its own stack at most once per this many milliseconds (reused meanwhile)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l holder-sample-hz -d 'Per CPU, samples a second that take a GIL holder\'s native stack (its C function) while others wait behind it; 0: off' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l syscalls -d 'Count each thread\'s syscalls, calls and time (the clock-syscall check). Off by default: the probe runs on every syscall of the machine (about 0.3 µs each for unwatched processes)' -r -f -a "on\t'count calls and time per thread and syscall (a probe on every syscall of the machine)'
off\t''"
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l pods -d 'Where the names of the node\'s pods come from: api (the API server, from inside the cluster: the pods of --node-name), a URL that answers a PodList (e.g. the kubelet\'s https://NODE:10250/pods), off, or auto: api when in a pod with --node-name set, else off' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l node-name -d 'The node whose pods `--pods api` lists (the chart sets NODE_NAME from spec.nodeName)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l pods-token-file -d 'File holding a bearer token for a --pods URL, read again for every fetch (https only; api uses the service account\'s)' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l pods-ca-file -d 'CA certificates (PEM) to check a --pods https:// server with (default: the system\'s)' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -l pods-refresh -d 'Seconds between fetches of the pod list (a container the last list did not name asks for one sooner, at most every 5 s)' -r
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -s v -l verbose -d 'More log output on stderr (-v: info, -vv: debug, including libbpf\'s log); with attach, the verdict lists every finding, idle threads one by one'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand dump" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand completions" -s v -l verbose -d 'More log output on stderr (-v: info, -vv: debug, including libbpf\'s log); with attach, the verdict lists every finding, idle threads one by one'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand completions" -s h -l help -d 'Print help'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand man" -l dir -d 'Write waitmeter.1, waitmeter-attach.1, ... into this directory instead' -r -F
complete -c waitmeter -n "__fish_waitmeter_using_subcommand man" -s v -l verbose -d 'More log output on stderr (-v: info, -vv: debug, including libbpf\'s log); with attach, the verdict lists every finding, idle threads one by one'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand man" -s h -l help -d 'Print help'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand metrics-doc" -s v -l verbose -d 'More log output on stderr (-v: info, -vv: debug, including libbpf\'s log); with attach, the verdict lists every finding, idle threads one by one'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand metrics-doc" -s h -l help -d 'Print help'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand help; and not __fish_seen_subcommand_from attach run dump completions man metrics-doc help" -f -a "attach" -d 'Measure one process for a while: a live per-thread table, then a report'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand help; and not __fish_seen_subcommand_from attach run dump completions man metrics-doc help" -f -a "run" -d 'Serve Prometheus metrics for one or more processes, or all of them'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand help; and not __fish_seen_subcommand_from attach run dump completions man metrics-doc help" -f -a "dump" -d 'What every thread of a process waits on now: its state, whom it waits behind, and the code on both sides (from a short window: --window)'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand help; and not __fish_seen_subcommand_from attach run dump completions man metrics-doc help" -f -a "completions" -d 'Print a shell\'s completion script (generated from this command line)'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand help; and not __fish_seen_subcommand_from attach run dump completions man metrics-doc help" -f -a "man" -d 'Print the man page (generated from this command line), or write every page to a directory'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand help; and not __fish_seen_subcommand_from attach run dump completions man metrics-doc help" -f -a "metrics-doc" -d 'Print docs/metrics.md, generated from the metric catalogue'
complete -c waitmeter -n "__fish_waitmeter_using_subcommand help; and not __fish_seen_subcommand_from attach run dump completions man metrics-doc help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
