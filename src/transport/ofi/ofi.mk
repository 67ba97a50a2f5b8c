# Network transports built as loadable modules (this file and ucx.mk; this
# one is included first): libmoeccl has each one's proxy, which loads the
# module moeccl_net_<name>.so the first time a communicator needs it,
# because loading the network library runs constructors that install signal
# handlers (ucx_load.c, ofi_load.c say which).  A module links its network
# library and nothing of libmoeccl (net_module.h: the library hands it a
# table of the internals it calls), so a program linked with libmoeccl.a
# loads it too.  Modules are installed in $(pkglibdir), and in the build
# tree lie beside libmoeccl.so (.libs), where net_load.c looks.  Their own
# directory variable: pkglib_LTLIBRARIES is assigned in shim/local.mk,
# after this file.  The loader is built whatever the transports: it is
# small, and one place keeps it from being listed twice.
libmoeccl_core_la_SOURCES += src/transport/net_load.c src/transport/net_load.h \
  src/transport/net_module.h
libmoeccl_core_la_CPPFLAGS += -DMOECCL_PKGLIBDIR='"$(pkglibdir)"'
netmoddir = $(pkglibdir)
netmod_LTLIBRARIES =

# libfabric transport: built when configure found libfabric.
# LIBADD is only appended to here (ucx.mk may append too); src/local.mk
# gives libmoeccl_core_la_LIBADD its first `=` assignment.  libmoeccl links
# no libfabric: on Debian 12 libfabric pulls in libinfinipath.so.4, whose
# constructor installs a SIGSEGV handler.
if HAVE_LIBFABRIC
libmoeccl_core_la_SOURCES += src/transport/ofi/ofi_load.c
libmoeccl_core_la_CPPFLAGS += -DMOECCL_TRANSPORT_OFI
netmod_LTLIBRARIES += moeccl_net_ofi.la
moeccl_net_ofi_la_SOURCES = src/transport/ofi/ofi.h src/transport/ofi/setup.c \
  src/transport/ofi/mem.c src/transport/ofi/post.c src/transport/ofi/progress.c \
  src/transport/net_module.c src/transport/net_module.h
moeccl_net_ofi_la_CPPFLAGS = $(AM_CPPFLAGS) -include $(top_builddir)/config.h \
  $(libfabric_CPPFLAGS)
moeccl_net_ofi_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden
moeccl_net_ofi_la_LIBADD = $(libfabric_LDFLAGS) $(libfabric_LIBS)
moeccl_net_ofi_la_LDFLAGS = -module -avoid-version -shared -no-undefined -Wl,--no-undefined \
  -export-symbols-regex '^moeccl_net_module_init$$'
endif
