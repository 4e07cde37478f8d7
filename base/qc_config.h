/* qc_config.h — build-wide constants: the one place for version and tunables. */
#ifndef QC_CONFIG_H
#define QC_CONFIG_H

#define QC_VERSION "0.1.0"
/* bytes streamed per write/hash step while converting; bounds RSS */
#define QC_STREAM_CHUNK (4u << 20)
/* GGUF arrays longer than this are summarized, not copied, into manifest "metadata" */
#define QC_META_MAX_ARRAY 4096

#endif
