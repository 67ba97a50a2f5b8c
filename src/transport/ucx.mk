# UCX transport: built when configure found UCX.
# LIBADD is only appended to here (ofi.mk may append too); src/local.mk
# should give libmoeccl_core_la_LIBADD its first `=` assignment.
if HAVE_UCX
libmoeccl_core_la_SOURCES += src/transport/ucx.c
libmoeccl_core_la_CPPFLAGS += -DMOECCL_TRANSPORT_UCX $(ucx_CPPFLAGS)
libmoeccl_core_la_LIBADD += $(ucx_LDFLAGS) $(ucx_LIBS) -lucs
endif
