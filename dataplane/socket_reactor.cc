// socket reactor
