// SPDX-License-Identifier: GPL-2.0
/*
 * store.c - the bytes behind device and system memory objects.
 *
 * FB stays accounting (memory.c): an allocation is a number.  Only where a
 * client reaches the bytes, through a CPU mapping (mmap.c) or through the
 * engine at a GPU virtual address (pbdma.c), are pages made: one zeroed
 * page per page index, on first touch, shared by every CPU mapping of the
 * object and by the engine, as on a real GPU where the CPU's BAR1 mapping
 * and the copy engine reach the same FB.  OS descriptors need none: their
 * pages are the caller's own, pinned (memory.c).
 *
 * The store is reference counted on its own (the memory object holds one,
 * every mapping context and mmap()ed area another), so that mmap()'s fault
 * path can reach it without nvsim.lock, and a store outlives an object
 * freed while mapped, as the channel pages do.  Pages are held in an
 * xarray (its own lock); two racing first touches agree through
 * xa_cmpxchg.  All stores together are bounded by NVSIM_STORE_MAX_BYTES:
 * beyond it a touch fails (SIGBUS for the CPU, an MMU fault for the
 * engine), never the host.
 */
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/xarray.h>

#include "nvsim.h"

/* Bound on the pages all stores hold together (a simulator, not a GPU). */
#define NVSIM_STORE_MAX_BYTES   (512ULL << 20)

static atomic64_t nvsim_store_pages = ATOMIC64_INIT(0);

struct nvsim_store {
	refcount_t refs;
	unsigned long nr_pages;         /* the object's size in pages */
	struct xarray pages;
};

/* Under nvsim.lock: the memory's store, made on first use. */
struct nvsim_store *nvsim_mem_store(struct nvsim_mem *mem)
{
	struct nvsim_store *st;

	lockdep_assert_held(&nvsim.lock);
	if (mem->store)
		return mem->store;
	st = kzalloc(sizeof(*st), GFP_KERNEL_ACCOUNT);
	if (!st)
		return NULL;
	refcount_set(&st->refs, 1);
	st->nr_pages = DIV_ROUND_UP(mem->size, PAGE_SIZE);
	xa_init(&st->pages);
	mem->store = st;
	return st;
}

void nvsim_store_get(struct nvsim_store *st)
{
	if (st)
		refcount_inc(&st->refs);
}

void nvsim_store_put(struct nvsim_store *st)
{
	struct page *page;
	unsigned long idx;

	if (!st || !refcount_dec_and_test(&st->refs))
		return;
	xa_for_each(&st->pages, idx, page) {
		put_page(page);
		atomic64_dec(&nvsim_store_pages);
	}
	xa_destroy(&st->pages);
	kfree(st);
}

/**
 * nvsim_store_page - the page at @idx, made (zeroed) on first use
 * @st: the store
 * @idx: page index into the object
 *
 * May sleep.  The page stays the store's (no reference is taken for the
 * caller): it lives as long as the store.
 *
 * Return: the page, or NULL beyond the object, past the bound or out of
 * memory.
 */
struct page *nvsim_store_page(struct nvsim_store *st, unsigned long idx)
{
	struct page *page, *old;

	if (idx >= st->nr_pages)
		return NULL;
	page = xa_load(&st->pages, idx);
	if (page)
		return page;
	if (atomic64_inc_return(&nvsim_store_pages) >
	    (s64)(NVSIM_STORE_MAX_BYTES >> PAGE_SHIFT)) {
		atomic64_dec(&nvsim_store_pages);
		return NULL;
	}
	page = alloc_page(GFP_KERNEL_ACCOUNT | __GFP_ZERO);
	if (!page) {
		atomic64_dec(&nvsim_store_pages);
		return NULL;
	}
	old = xa_cmpxchg(&st->pages, idx, NULL, page, GFP_KERNEL_ACCOUNT);
	if (old) {
		/* Someone else made it first, or the xarray failed. */
		put_page(page);
		atomic64_dec(&nvsim_store_pages);
		return xa_is_err(old) ? NULL : old;
	}
	return page;
}

/**
 * nvsim_mem_page - the page behind @mem at page index @idx
 * @mem: device or system memory, or an OS descriptor
 * @idx: page index into the object
 *
 * Under nvsim.lock (the engine's work and the control path); may sleep.
 * Virtual memory has no pages.
 */
struct page *nvsim_mem_page(struct nvsim_mem *mem, unsigned long idx)
{
	struct nvsim_store *st;

	lockdep_assert_held(&nvsim.lock);
	if (mem->pinned)
		return idx < mem->nr_pinned ? mem->pinned[idx] : NULL;
	if (mem->hclass != NV01_MEMORY_SYSTEM && !nvsim_is_fb_class(mem->hclass))
		return NULL;
	st = nvsim_mem_store(mem);
	return st ? nvsim_store_page(st, idx) : NULL;
}

u64 nvsim_store_bytes(void)
{
	return (u64)atomic64_read(&nvsim_store_pages) << PAGE_SHIFT;
}
