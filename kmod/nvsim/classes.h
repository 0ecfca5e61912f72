/* SPDX-License-Identifier: GPL-2.0 */
/*
 * classes.h - the class table's types, shared by objects.c and the files
 * that make classes of their own concern (cuda.c).
 */
#ifndef NVSIM_CLASSES_H
#define NVSIM_CLASSES_H

#include "nvsim.h"

struct nvsim_class_desc;

typedef NV_STATUS (*nvsim_ctor_t)(const struct nvsim_call *call,
				  const struct nvsim_class_desc *cls,
				  struct nvsim_client *client,
				  struct nvsim_object *parent, NvHandle *handle,
				  u32 hclass, void *params);

/**
 * struct nvsim_class_desc - what RM_ALLOC needs to know about a class
 * @hclass: the class number
 * @params_size: the size of the class's parameter struct; the driver copies
 *	this many bytes whatever paramsSize says
 * @params_optional: a NULL pAllocParms is allowed (the class has defaults)
 * @parents: NVSIM_BIT() mask of the object types the parent may be
 * @ctor: makes the object
 */
struct nvsim_class_desc {
	u32 hclass;
	u32 params_size;
	bool params_optional;
	u32 parents;
	nvsim_ctor_t ctor;
};

/* cuda.c: the classes CUDA's start-up makes beyond objects.c's. */
const struct nvsim_class_desc *nvsim_cuda_class_find(u32 hclass);
/* peer.c: NV50_P2P. */
const struct nvsim_class_desc *nvsim_peer_class_find(u32 hclass);

#endif /* NVSIM_CLASSES_H */
