{name = "flat", workers = 2, nodes = {"n0", "n1"}, node = "n0", restore = "/tmp/ck", optimizer = "lamb", weight_decay = 0.01, eta = 0.001, rescale = 0.5}
