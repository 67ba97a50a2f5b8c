# libfabric transport: built when configure found libfabric.
# The convenience library's LIBADD reaches libmoeccl.la and the unit tests.
if HAVE_LIBFABRIC
libmoeccl_core_la_SOURCES += src/transport/ofi.c
libmoeccl_core_la_CPPFLAGS += -DMOECCL_TRANSPORT_OFI $(libfabric_CPPFLAGS)
libmoeccl_core_la_LIBADD += $(libfabric_LDFLAGS) $(libfabric_LIBS)
endif
