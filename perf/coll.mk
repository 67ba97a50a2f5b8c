# (owned by one part of the work; see the commit that fills it)
