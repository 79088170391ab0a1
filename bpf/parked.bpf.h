/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The `parked` map, in both BPF objects that use it: host TID -> the address
 * a thread parked on in CPython's parking lot (3.13+), while it sleeps on its
 * wait entry's semaphore. bpf/pypark.bpf.c writes it, bpf/sched.bpf.c reads it
 * at switch-out; the sched object owns it and user space hands its fd to the
 * pypark object before load (agent/src/probes/pypark.rs).
 */
#ifndef WAITMETER_PARKED_BPF_H
#define WAITMETER_PARKED_BPF_H

#include "pypark.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WM_DEFAULT_MAX_PARKED);
	__type(key, __u32);
	__type(value, __u64);
} parked SEC(".maps");

#endif /* WAITMETER_PARKED_BPF_H */
