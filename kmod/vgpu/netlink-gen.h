/* SPDX-License-Identifier: GPL-2.0 */
/* Generated from kmod/netlink/vgpu.yaml by tools/ynl_gen.py: do not edit (make generate). */
#ifndef _VGPU_NETLINK_GEN_H
#define _VGPU_NETLINK_GEN_H

#include <net/netlink.h>
#include <net/genetlink.h>

#include "uapi/vgpu.h"

extern const struct nla_policy vgpu_gpu_policy[VGPU_GPU_A_MAX + 1];
extern const struct nla_policy vgpu_list_policy[VGPU_A_LIST_MAX + 1];
extern const struct nla_policy vgpu_allow_policy[VGPU_A_LIST_MAX + 1];
extern const struct nla_policy vgpu_policy[VGPU_A_MAX + 1];

/* The multicast groups, by their place in vgpu_mcgrps. */
enum {
	VGPU_MCGRP_EVENTS_ID,
	VGPU_MCGRP_TRACE_ID,
};
extern const struct genl_multicast_group vgpu_mcgrps[2];

/* The handlers (netlink.c) of the ops table. */
int vgpu_nl_new(struct sk_buff *skb, struct genl_info *info);
int vgpu_nl_set(struct sk_buff *skb, struct genl_info *info);
int vgpu_nl_del(struct sk_buff *skb, struct genl_info *info);
int vgpu_nl_get(struct sk_buff *skb, struct genl_info *info);
int vgpu_nl_dump(struct sk_buff *skb, struct netlink_callback *cb);
int vgpu_nl_sched_set(struct sk_buff *skb, struct genl_info *info);
int vgpu_nl_sched_get(struct sk_buff *skb, struct genl_info *info);
int vgpu_nl_sched_dump(struct sk_buff *skb, struct netlink_callback *cb);
int vgpu_nl_audit_start(struct netlink_callback *cb);
int vgpu_nl_audit_dump(struct sk_buff *skb, struct netlink_callback *cb);
int vgpu_nl_audit_done(struct netlink_callback *cb);
extern const struct genl_ops vgpu_ops[7];

#endif /* _VGPU_NETLINK_GEN_H */
