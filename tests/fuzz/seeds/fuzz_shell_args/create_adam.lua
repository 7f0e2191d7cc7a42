{name = "resnet-a", workers = 4, optimizer = "adam", lr = 0.001, consistency = "ssp:2", chunk_bytes = "1MiB", tensors = {{"conv1.weight", 9408}, {name = "fc.bias", elements = 1000, has_init = true}}}
