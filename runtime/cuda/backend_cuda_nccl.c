/* backend_cuda_nccl.c — NCCL loaded at run time (backend_cuda_nccl.h). */
#include "backend_cuda_nccl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NCCL_SONAME "libnccl.so.2"

static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
static bool load_done;         /* under load_mu: load_rc / load_err / lib are final */
static int load_rc;
static struct qc_err load_err;
static void *load_handle;
static struct qc_nccl lib;

const char *qc_nccl_version_str(int code, char *buf, size_t len)
{
	int major, minor, patch;
	if (code >= 20900) { /* NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9 */
		major = code / 10000;
		minor = code / 100 % 100;
		patch = code % 100;
	} else {             /* X*1000 + Y*100 + Z before */
		major = code / 1000;
		minor = code / 100 % 10;
		patch = code % 100;
	}
	snprintf(buf, len, "%d.%d.%d", major, minor, patch);
	return buf;
}

/* dlsym into a function pointer (memcpy: ISO C has no object-to-function cast). */
static bool resolve(void *h, const char *name, void *fn_ptr, size_t fn_size)
{
	void *p = dlsym(h, name);
	if (!p)
		return false;
	memcpy(fn_ptr, &p, fn_size);
	return true;
}

#define RESOLVE(h, name, field) resolve((h), (name), &(field), sizeof(field))

/* dlopen of path (RTLD_LOCAL: NCCL's symbols stay its own); NULL with the
 * loader's message in why. */
static void *open_lib(const char *path, char *why, size_t why_len)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(why, why_len, "%s", e ? e : "dlopen failed");
	}
	return h;
}

/* The library's functions into lib; the version first, so that an old library
 * is named by its version rather than by a missing symbol. */
static int bind(void *h, const char *path, struct qc_err *err)
{
	char v[16], vmin[16];
	memset(&lib, 0, sizeof lib);
	snprintf(lib.path, sizeof lib.path, "%s", path);
	if (!RESOLVE(h, "ncclGetVersion", lib.get_version))
		return qc_err_set(err, QC_ECUDA, path, NULL, -1, "not an NCCL library: no ncclGetVersion");
	if (lib.get_version(&lib.version) != 0)
		return qc_err_set(err, QC_ECUDA, path, NULL, -1, "ncclGetVersion failed");
	if (lib.version < QC_NCCL_MIN_VERSION)
		return qc_err_set(err, QC_ECUDA, path, NULL, -1,
				  "NCCL %s is older than %s, the oldest this backend runs with (graph capture of "
				  "collectives mixed with eager ones, one thread per rank): install a newer one "
				  "(pip install nvidia-nccl-cu13, QC_NCCL_LIB=its lib folder)",
				  qc_nccl_version_str(lib.version, v, sizeof v),
				  qc_nccl_version_str(QC_NCCL_MIN_VERSION, vmin, sizeof vmin));
	static const char *const names[] = {"ncclGetUniqueId", "ncclCommInitRank", "ncclAllReduce", "ncclCommDestroy",
					    "ncclCommAbort", "ncclGetErrorString", "ncclGetLastError"};
	const bool ok[] = {
		RESOLVE(h, names[0], lib.get_unique_id),   RESOLVE(h, names[1], lib.comm_init_rank),
		RESOLVE(h, names[2], lib.all_reduce),      RESOLVE(h, names[3], lib.comm_destroy),
		RESOLVE(h, names[4], lib.comm_abort),      RESOLVE(h, names[5], lib.get_error_string),
		RESOLVE(h, names[6], lib.get_last_error),
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		if (!ok[i])
			return qc_err_set(err, QC_ECUDA, path, NULL, -1, "NCCL %s has no %s",
					  qc_nccl_version_str(lib.version, v, sizeof v), names[i]);
	return QC_OK;
}

/* The search: $QC_NCCL_LIB (a file, or a folder holding libnccl.so.2), then the
 * loader's own search for libnccl.so.2 (LD_LIBRARY_PATH, the binary's run path,
 * which names the CUDA toolkit's lib64, the system's). */
static int load_locked(const char *hint, struct qc_err *err)
{
	char tried[1024] = "", why[256], path[512];
	void *h = NULL;
	const char *from = NULL;
	int rc;

	/* before any NCCL code runs, its constructors included: NVLink multicast
	   (NVLS) stays off on these shared hosts unless the environment says otherwise */
	setenv("NCCL_NVLS_ENABLE", "0", 0);
	if (hint && *hint) {
		struct stat st;
		const bool dir = stat(hint, &st) == 0 && S_ISDIR(st.st_mode);
		snprintf(path, sizeof path, dir ? "%s/" NCCL_SONAME : "%s", hint);
		if ((h = open_lib(path, why, sizeof why)))
			from = path;
		else
			snprintf(tried, sizeof tried, "QC_NCCL_LIB=%s: %s; ", hint, why);
	}
	if (!h) {
		if ((h = open_lib(NCCL_SONAME, why, sizeof why)))
			from = NCCL_SONAME;
		else
			snprintf(tried + strlen(tried), sizeof tried - strlen(tried), "%s: %s", NCCL_SONAME, why);
	}
	if (!h)
		return qc_err_set(err, QC_ECUDA, NULL, NULL, -1,
				  "NCCL not found (CUDA tensor parallelism needs libnccl.so.2): %s. Install the "
				  "CUDA toolkit's libnccl, or pip install nvidia-nccl-cu13 and set QC_NCCL_LIB to the "
				  "wheel's lib folder holding libnccl.so.2", tried);
	if (*tried) /* QC_NCCL_LIB was given and failed: say which library runs instead */
		QC_WARN_ONCE("cuda: %sloaded %s from the default search instead", tried, NCCL_SONAME);
	if ((rc = bind(h, from, err))) {
		dlclose(h);
		return rc;
	}
	load_handle = h;
	char v[16];
	const char *nvls = getenv("NCCL_NVLS_ENABLE");
	fprintf(stderr, "cuda: NCCL %s (%s), NCCL_NVLS_ENABLE=%s\n", qc_nccl_version_str(lib.version, v, sizeof v),
		from, nvls ? nvls : "?");
	return QC_OK;
}

int qc_nccl_load(const char *hint, const struct qc_nccl **out, struct qc_err *err)
{
	*out = NULL;
	pthread_mutex_lock(&load_mu);
	if (!load_done) {
		memset(&load_err, 0, sizeof load_err);
		load_rc = load_locked(hint, &load_err);
		load_done = true;
	}
	const int rc = load_rc;
	const struct qc_err e = load_err;
	pthread_mutex_unlock(&load_mu);
	if (rc) {
		if (err)
			*err = e;
		return rc;
	}
	*out = &lib;
	return QC_OK;
}

void qc_nccl_unload(void)
{
	pthread_mutex_lock(&load_mu);
	if (load_handle)
		dlclose(load_handle);
	load_handle = NULL;
	load_done = false;
	load_rc = QC_OK;
	memset(&lib, 0, sizeof lib);
	pthread_mutex_unlock(&load_mu);
}

int qc_nccl_check(const struct qc_nccl *n, int result, const char *what, qc_nccl_comm_t comm, struct qc_err *err)
{
	if (result == 0)
		return QC_OK;
	const char *s = n && n->get_error_string ? n->get_error_string(result) : NULL;
	const char *last = n && n->get_last_error ? n->get_last_error(comm) : NULL;
	return qc_err_set(err, QC_ECUDA, NULL, NULL, -1, "NCCL %s: %s (%d)%s%s%s", what, s ? s : "error", result,
			  last && *last ? " (" : "", last && *last ? last : "", last && *last ? ")" : "");
}

int qc_nccl_agree(struct qc_tp_group *g, int rank, bool ok, struct qc_nccl_id *id)
{
	struct qc_nccl_boot *b = qc_tp_group_slot(g);
	const int size = qc_tp_group_size(g);
	if (rank == 0)
		b->id = *id;
	b->fail[rank] = ok ? 0 : 1;
	qc_tp_barrier(g); /* every rank's word and rank 0's id written */
	int bad = -1;
	for (int r = 0; r < size && bad < 0; r++)
		if (b->fail[r])
			bad = r;
	*id = b->id;
	qc_tp_barrier(g); /* every rank has read: the slot may be written again */
	return bad;
}
