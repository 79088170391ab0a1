/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The state timeline (bpf/timeline.h): a span per closed interval of a
 * watched thread, into `spans`, when `cfg.timeline` is set. Included by
 * sched.bpf.c, whose charge() and charge_runqueue() call span() for every
 * interval they close. One ring buffer reservation and submit a span; a
 * full ring counts the span lost (WM_STAT_SPAN_RINGBUF_FULL) and the agent
 * marks the thread's timeline as having a gap.
 */
#ifndef WAITMETER_TIMELINE_BPF_H
#define WAITMETER_TIMELINE_BPF_H

#include "timeline.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, WM_SPANS_OFF_BYTES);
} spans SEC(".maps");

struct wm_span _wm_span = {};

/* Report the interval in `state` from `since` to `now` spent behind `culprit` (`by_tgid`). */
static __always_inline void span(__u32 tid, __u32 tgid, __u32 state, __u64 since, __u64 now, __u64 culprit, __u32 by_tgid)
{
	struct wm_span *s;

	if (!cfg.timeline || now <= since)
		return;
	s = bpf_ringbuf_reserve(&spans, sizeof(*s), 0);
	if (!s) {
		count_loss(WM_STAT_SPAN_RINGBUF_FULL);
		return;
	}
	s->tid = tid;
	s->tgid = tgid;
	s->start = since;
	s->end = now;
	s->culprit = culprit;
	s->by_tgid = by_tgid;
	s->state = state;
	/* no wakeup: the agent drains the ring on its own tick */
	bpf_ringbuf_submit(s, BPF_RB_NO_WAKEUP);
}

#endif /* WAITMETER_TIMELINE_BPF_H */
