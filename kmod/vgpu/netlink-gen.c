// SPDX-License-Identifier: GPL-2.0
/* Generated from kmod/netlink/vgpu.yaml by tools/ynl_gen.py: do not edit (make generate). */
/*
 * The request policies of the family (one per attribute set that a request
 * carries; an attribute no request may carry is NLA_REJECT, so it is
 * refused with an extack message naming it), its ops table and its
 * multicast groups.  netlink.c registers them and implements the handlers.
 */
#include "vgpu.h"
#include "netlink-gen.h"

/* VGPU_A_SCHED_PERIOD_US: above s16, the policy's own min/max cannot hold it
 * (not const: this kernel's nla_policy points to a mutable one). */
static struct netlink_range_validation vgpu_sched_period_us_range __ro_after_init = {
	.min = VGPU_SCHED_PERIOD_MIN_US,
	.max = VGPU_SCHED_PERIOD_MAX_US,
};

const struct nla_policy vgpu_gpu_policy[VGPU_GPU_A_MAX + 1] = {
	[VGPU_GPU_A_INDEX] = NLA_POLICY_MAX(NLA_U32, VGPU_MAX_SLICE_GPUS - 1),
	[VGPU_GPU_A_REAL_MINOR] = NLA_POLICY_MAX(NLA_U32, NV_MAX_GPU_MINOR),
	[VGPU_GPU_A_MEM_LIMIT] = { .type = NLA_U64 },
	[VGPU_GPU_A_MEM_USED] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_GPU_A_MEM_PEAK] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_GPU_A_ALLOCS] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_GPU_A_REFUSALS] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_GPU_A_MINOR] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_GPU_A_GPU_ID] = { .type = NLA_U32 },
	[VGPU_GPU_A_PAD] = { .type = NLA_REJECT },
	[VGPU_GPU_A_COMPUTE_POLICY] = NLA_POLICY_MAX(NLA_U32, __VGPU_COMPUTE_POLICY_MAX - 1),
	[VGPU_GPU_A_COMPUTE_BP] = NLA_POLICY_RANGE(NLA_U32, 1, VGPU_COMPUTE_BP_MAX),
	[VGPU_GPU_A_PRIORITY] = NLA_POLICY_MAX(NLA_U32, __VGPU_PRIORITY_MAX - 1),
	[VGPU_GPU_A_GPU_TIME_NS] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_GPU_A_TSGS] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_GPU_A_CHANNELS] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_GPU_A_PAUSED] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_GPU_A_DOORBELL_TRAPS] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
};

const struct nla_policy vgpu_list_policy[VGPU_A_LIST_MAX + 1] = {
	[VGPU_A_GPU] = NLA_POLICY_NESTED(vgpu_gpu_policy),
	[VGPU_A_PID] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_ALLOW] = { .type = NLA_REJECT, .reject_message = "belongs in VGPU_A_SLICE_ALLOW" },
	[VGPU_A_AUDIT_ENTRY] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
};

/* VGPU_A_SLICE_ALLOW holds VGPU_A_ALLOW entries and nothing else. */
const struct nla_policy vgpu_allow_policy[VGPU_A_LIST_MAX + 1] = {
	[VGPU_A_GPU] = { .type = NLA_REJECT, .reject_message = "belongs in VGPU_A_SLICE_GPUS" },
	[VGPU_A_PID] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_ALLOW] = { .type = NLA_U64 },
	[VGPU_A_AUDIT_ENTRY] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
};

const struct nla_policy vgpu_policy[VGPU_A_MAX + 1] = {
	[VGPU_A_SLICE_ID] = NLA_POLICY_MIN(NLA_U32, 1),
	[VGPU_A_SLICE_NAME] = { .type = NLA_NUL_STRING, .len = VGPU_SLICE_NAME_MAX - 1 },
	[VGPU_A_SLICE_FLAGS] = NLA_POLICY_MASK(NLA_U32, VGPU_SLICE_F_ALL),
	[VGPU_A_SLICE_UVM_POLICY] = NLA_POLICY_MAX(NLA_U32, __VGPU_UVM_POLICY_MAX - 1),
	[VGPU_A_SLICE_GPUS] = NLA_POLICY_NESTED(vgpu_list_policy),
	[VGPU_A_SLICE_MAJOR] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_SLICE_BASE_MINOR] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_SLICE_OPEN_FILES] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_SLICE_PIDS] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_SLICE_UVM_MAPPED] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_EVENT_TYPE] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_EVENT_PID] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_EVENT_GPU] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_EVENT_SIZE] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_PAD] = { .type = NLA_REJECT },
	[VGPU_A_SLICE_CGROUP_FD] = { .type = NLA_U32 },
	[VGPU_A_SLICE_CGROUP_ID] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_SCHED_REAL_MINOR] = NLA_POLICY_MAX(NLA_U32, NV_MAX_GPU_MINOR),
	[VGPU_A_SCHED_PERIOD_US] = NLA_POLICY_FULL_RANGE(NLA_U32, &vgpu_sched_period_us_range),
	[VGPU_A_SCHED_LAYERS] = NLA_POLICY_MASK(NLA_U32, VGPU_SCHED_L_ALL),
	[VGPU_A_SCHED_SWITCHES] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_SCHED_CPU_NS] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_SLICE_MAX_CHANNELS] = { .type = NLA_U32 },
	[VGPU_A_SLICE_QUARANTINED] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_SLICE_AUDIT] = NLA_POLICY_MAX(NLA_U8, 1),
	[VGPU_A_SLICE_ALLOW] = NLA_POLICY_NESTED(vgpu_allow_policy),
	[VGPU_A_SLICE_ALLOW_COUNT] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_AUDIT] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_AUDIT_DROPPED] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
	[VGPU_A_SLICE_TRACE] = NLA_POLICY_MAX(NLA_U8, 1),
	[VGPU_A_TRACE] = { .type = NLA_REJECT, .reject_message = "trace-message-only attribute" },
	[VGPU_A_SLICE_PIDS_TRUNCATED] = { .type = NLA_REJECT, .reject_message = "reply-only attribute" },
};

const struct genl_multicast_group vgpu_mcgrps[] = {
	/*
	 * Events carry host pids, container slices and sizes: listeners need
	 * CAP_NET_ADMIN, like the commands.
	 */
	[VGPU_MCGRP_EVENTS_ID] = {
		.name = VGPU_GENL_MCGRP_EVENTS,
		.flags = GENL_MCAST_CAP_NET_ADMIN,
	},
	/* Traces carry the parameters of a container's calls: the same. */
	[VGPU_MCGRP_TRACE_ID] = {
		.name = VGPU_GENL_MCGRP_TRACE,
		.flags = GENL_MCAST_CAP_NET_ADMIN,
	},
};

const struct genl_ops vgpu_ops[] = {
	{
		.cmd = VGPU_CMD_SLICE_NEW,
		.doit = vgpu_nl_new,
		.flags = GENL_ADMIN_PERM,
	},
	{
		.cmd = VGPU_CMD_SLICE_SET,
		.doit = vgpu_nl_set,
		.flags = GENL_ADMIN_PERM,
	},
	{
		.cmd = VGPU_CMD_SLICE_DEL,
		.doit = vgpu_nl_del,
		.flags = GENL_ADMIN_PERM,
	},
	{
		.cmd = VGPU_CMD_SLICE_GET,
		.doit = vgpu_nl_get,
		.dumpit = vgpu_nl_dump,
		.flags = GENL_ADMIN_PERM,
	},
	{
		.cmd = VGPU_CMD_SCHED_SET,
		.doit = vgpu_nl_sched_set,
		.flags = GENL_ADMIN_PERM,
	},
	{
		.cmd = VGPU_CMD_SCHED_GET,
		.doit = vgpu_nl_sched_get,
		.dumpit = vgpu_nl_sched_dump,
		.flags = GENL_ADMIN_PERM,
	},
	{
		.cmd = VGPU_CMD_AUDIT_GET,
		.start = vgpu_nl_audit_start,
		.dumpit = vgpu_nl_audit_dump,
		.done = vgpu_nl_audit_done,
		.flags = GENL_ADMIN_PERM,
	},
};
