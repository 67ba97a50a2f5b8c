# UCX transport: built when configure found UCX.
# LIBADD is only appended to here (ofi.mk may append too); src/local.mk
# should give libmoeccl_core_la_LIBADD its first `=` assignment.
#
# libmoeccl links no UCX: it has the proxy (ucx_load.c), which loads the
# module moeccl_net_ucx.so (ucx.c) the first time a communicator needs UCX,
# because loading UCX installs its signal handlers (ucx_load.c says more).
# The loader they share, netmoddir and the first netmod_LTLIBRARIES
# assignment are in ofi.mk, included before this file.
if HAVE_UCX
libmoeccl_core_la_SOURCES += src/transport/ucx/ucx_load.c
libmoeccl_core_la_CPPFLAGS += -DMOECCL_TRANSPORT_UCX
netmod_LTLIBRARIES += moeccl_net_ucx.la
moeccl_net_ucx_la_SOURCES = src/transport/ucx/ucx.c src/transport/net_module.c \
  src/transport/net_module.h
moeccl_net_ucx_la_CPPFLAGS = $(AM_CPPFLAGS) -include $(top_builddir)/config.h $(ucx_CPPFLAGS)
moeccl_net_ucx_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden
moeccl_net_ucx_la_LIBADD = $(ucx_LDFLAGS) $(ucx_LIBS) -lucs
moeccl_net_ucx_la_LDFLAGS = -module -avoid-version -shared -no-undefined -Wl,--no-undefined \
  -export-symbols-regex '^moeccl_net_module_init$$'
endif
