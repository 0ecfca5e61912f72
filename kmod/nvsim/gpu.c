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
#include <crypto/sha1.h>
#include <asm/unaligned.h>

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

/**
 * nvsim_gpu_put - drop a reference on the GPU (an attach, a kernel
 * caller's open_gpu, a dma-buf's nvidia_dev_get)
 * @gpu: the GPU
 *
 * The last one stops it (nv_close_device -> nv_stop_device; nvsim's GPUs
 * are never persistent): RM's internal client goes with the GPU's state
 * (memmgrStateDestroy_IMPL), and with it what dma-buf releases left dup'd
 * there (dmabuf.c).  nvsim counts no reference for an open of the GPU
 * node itself, which the driver does (nv_open_device).
 */
void nvsim_gpu_put(struct nvsim_gpu *gpu)
{
	lockdep_assert_held(&nvsim.lock);
	if (WARN_ON(!gpu->open_count))
		return;
	if (!--gpu->open_count)
		nvsim_dmabuf_gpu_stop(gpu);
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

/*
 * The GPU's UUID, made as the driver makes one (gpu_uuid.c,
 * _nvGenerateUuid for UUID_TYPE_GPU): the first 16 bytes of the SHA-1 of
 * a fixed 38-byte message holding the chip id (bytes 27..28, little
 * endian) and the 64-bit PDI (bytes 30..37, little endian), then marked as
 * a version 5 (byte 6) variant 1 (byte 8) UUID.  A real PDI is fused into
 * the die; nvsim's is "nvsim" and the GPU's bus number, so that each GPU's
 * UUID is stable across loads and differs per GPU and per chip.
 */
static const u8 nvsim_uuid_message[38] = {
	0xc8, 0x16, 0xc9, 0xa3, 0x52, 0x24, 0x56, 0xbf, 0x9d, 0x9a, 0xac,
	0x7e, 0xa7, 0x03, 0xfb, 0x5b, 'N', 'V', 'I', 'D', 'I', 'A',
	' ', 'G', 'P', 'U', 0x02, 0, 0, 0x08, 0, 0, 0, 0, 0, 0, 0, 0,
};

static void nvsim_gpu_uuid_init(struct nvsim_gpu *gpu)
{
	u32 digest[SHA1_DIGEST_WORDS], ws[SHA1_WORKSPACE_WORDS];
	u8 block[SHA1_BLOCK_SIZE] = {};
	u64 pdi = 0x6e7673696d000000ULL | gpu->bus;
	__be32 be;
	int i;

	/* One SHA-1 block: the message, 0x80, zeros, the length in bits. */
	memcpy(block, nvsim_uuid_message, sizeof(nvsim_uuid_message));
	put_unaligned_le16(nvsim_arch->chip_id, &block[27]);
	put_unaligned_le64(pdi, &block[30]);
	block[sizeof(nvsim_uuid_message)] = 0x80;
	put_unaligned_be64(sizeof(nvsim_uuid_message) * 8ULL,
			   &block[SHA1_BLOCK_SIZE - 8]);
	sha1_init(digest);
	sha1_transform(digest, (const char *)block, ws);
	for (i = 0; i < NV_UUID_LEN / 4; i++) {
		be = cpu_to_be32(digest[i]);
		memcpy(&gpu->uuid[4 * i], &be, 4);
	}
	gpu->uuid[6] = (gpu->uuid[6] & 0x0f) | 0x50;
	gpu->uuid[8] = (gpu->uuid[8] & 0x3f) | 0x80;
}

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (gpu_uuid.c, nvGetUuidString). */
void nvsim_uuid_string(const u8 *u, char *out)
{
	snprintf(out, NV_UUID_STR_LEN,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9],
		 u[10], u[11], u[12], u[13], u[14], u[15]);
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
		/* VA of virtual memory objects: from 4 GiB, chosen. */
		gpu->next_va = 1ULL << 32;
		nvsim_gpu_uuid_init(gpu);
		ida_init(&gpu->tsg_ida);
		ida_init(&gpu->chid_ida);
		INIT_LIST_HEAD(&gpu->tsgs);
		INIT_LIST_HEAD(&gpu->va_maps);
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
