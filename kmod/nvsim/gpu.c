// SPDX-License-Identifier: GPL-2.0
/*
 * gpu.c - the simulated GPUs: identity, FB size, and the usermode region.
 *
 * Each GPU has a 64 KiB usermode (doorbell) region, the window the real
 * hardware exposes at BAR0 + 0x810000.  It is real memory allocated here
 * once, so that every mapping of it, from any process, sees the same bytes:
 * the timer at NVC361_TIME_0/1 and the doorbell at
 * NVC361_NOTIFY_CHANNEL_PENDING.
 */
#include <linux/gfp.h>
#include <linux/mm.h>
#include <linux/ktime.h>
#include <linux/io.h>

#include "nvsim.h"

#define NVSIM_USERMODE_ORDER get_order(NVC361_USERMODE_REGION_SIZE)

/**
 * nvsim_gpu_update_timer - write the current time into the usermode region
 * @gpu: the GPU
 *
 * A plain page cannot tick by itself: the engine refreshes it every tick
 * while the GPU has channels (engine.c), and it is refreshed here whenever
 * the region is mapped.
 */
void nvsim_gpu_update_timer(struct nvsim_gpu *gpu)
{
	u32 *regs = page_address(gpu->usermode);
	u64 now = ktime_get_ns();

	WRITE_ONCE(regs[NVC361_TIME_1 / 4], upper_32_bits(now));
	WRITE_ONCE(regs[NVC361_TIME_0 / 4], lower_32_bits(now));
}

struct nvsim_gpu *nvsim_gpu_by_id(u32 gpu_id)
{
	unsigned int i;

	for (i = 0; i < nvsim.num_gpus; i++)
		if (nvsim.gpus[i].gpu_id == gpu_id)
			return &nvsim.gpus[i];
	return NULL;
}

/*
 * Device instances.  NV0080's deviceId names a device instance, which the
 * driver's gpumgr assigns as GPUs attach (gpumgrGetGpuFromDeviceInstance,
 * answered per gpuId by NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2); it need not be
 * the /dev minor.  nvsim numbers them as its minors unless debugfs
 * instance_rotate is set: instance = (minor + rotate) % num_gpus, so that
 * tests can tell the two apart.  Changed only while no object exists.
 */
u32 nvsim_instance_of(const struct nvsim_gpu *gpu)
{
	return (gpu->index + READ_ONCE(nvsim.instance_rotate)) % nvsim.num_gpus;
}

struct nvsim_gpu *nvsim_gpu_of_instance(u32 inst)
{
	if (inst >= nvsim.num_gpus)
		return NULL;
	return &nvsim.gpus[(inst + nvsim.num_gpus -
			    READ_ONCE(nvsim.instance_rotate) % nvsim.num_gpus) %
			   nvsim.num_gpus];
}

static void nvsim_gpu_fini(struct nvsim_gpu *gpu)
{
	WARN_ON(!list_empty(&gpu->tsgs));
	nvsim_engine_fini(gpu);
	ida_destroy(&gpu->chid_ida);
	ida_destroy(&gpu->tsg_ida);
	__free_pages(gpu->usermode, NVSIM_USERMODE_ORDER);
}

int nvsim_gpus_init(void)
{
	unsigned int i;

	for (i = 0; i < nvsim_num_gpus; i++) {
		struct nvsim_gpu *gpu = &nvsim.gpus[i];

		gpu->usermode = alloc_pages(GFP_KERNEL | __GFP_ZERO,
					    NVSIM_USERMODE_ORDER);
		if (!gpu->usermode)
			goto err;
		gpu->index = i;
		gpu->bus = NVSIM_PCI_BUS_BASE + i;
		gpu->gpu_id = (u32)gpu->bus << 8;
		gpu->fb_total = nvsim_fb_size;
		gpu->next_fb_offset = 0;
		ida_init(&gpu->tsg_ida);
		ida_init(&gpu->chid_ida);
		INIT_LIST_HEAD(&gpu->tsgs);
		nvsim_engine_init(gpu);
		nvsim_gpu_update_timer(gpu);
		nvsim.num_gpus = i + 1;
	}
	return 0;

err:
	nvsim_gpus_exit();
	return -ENOMEM;
}

void nvsim_gpus_exit(void)
{
	while (nvsim.num_gpus)
		nvsim_gpu_fini(&nvsim.gpus[--nvsim.num_gpus]);
}
